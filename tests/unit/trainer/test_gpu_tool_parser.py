"""The GPU path's tool calling: ART starts vLLM with the Hermes tool parser, the format
the torch server speaks too (docs/inference.md, "Tool calling on the policy server")."""

from __future__ import annotations

# Through art_compat: importing ART alone patches transformers' masking for the whole
# test process (see art_compat).
from artfleet_trainer.backends.art_compat import art

get_openai_server_config = art.dev.get_openai_server_config


def test_art_starts_vllm_with_auto_tool_choice_and_the_hermes_parser() -> None:
    config = get_openai_server_config("agent", "Qwen/Qwen2.5-0.5B-Instruct", "/tmp/vllm.log")
    args = config["server_args"]
    assert args["enable_auto_tool_choice"] is True
    assert args["tool_call_parser"] == "hermes"


def test_a_model_of_another_family_overrides_the_parser() -> None:
    override = {"server_args": {"tool_call_parser": "llama3_json"}}
    config = get_openai_server_config("a", "m", "/tmp/v.log", config=override)  # type: ignore[arg-type]
    assert config["server_args"]["tool_call_parser"] == "llama3_json"
