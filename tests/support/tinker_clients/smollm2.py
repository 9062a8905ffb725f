"""SmolLM2-135M-Instruct for tinker-cookbook (0.3 under ART, 0.6.1), imported by the
client drivers beside it, inside a client's own virtualenv: the renderer and tokenizer
registration the product ships (`artfleet.clients.tinker_renderers`, found in this checkout's
`src/` as a user would `pip install --no-deps` it), and SmolLM2's own chat template.

Run as a script (`smollm2.py FOLDER [CONVERSATIONS.jsonl]`) it checks the renderer: every
conversation of the file (the cookbook's example_data by default), as a supervised example
and as a generation prompt before each assistant turn, against the tokenizer's chat
template; prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from artfleet.clients.tinker_renderers import RENDERER, SMOLLM2, register

__all__ = ["RENDERER", "SMOLLM2", "SMOLLM2_TEMPLATE", "check", "register"]

# SmolLM2-135M-Instruct's own chat template (its GGUF's; the trainer's
# CHATML_TEMPLATE, which a test holds equal to this copy). The fleet's
# tokenizer folder carries an extension of it that adds tools and renders the same without.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def check(tokenizer_folder: str, conversations: Path) -> dict[str, object]:
    """Compare the renderer with SmolLM2's chat template and with the folder's, on every
    conversation: the whole of it as a supervised example, and the prompt before each
    assistant turn as a generation prompt."""
    from tinker_cookbook import renderers, tokenizer_utils

    register(tokenizer_folder)
    tok = tokenizer_utils.get_tokenizer(SMOLLM2)
    renderer = renderers.get_renderer(RENDERER, tok)
    builtin = renderers.get_renderer("qwen3_instruct", tok)
    newline = tok.encode("\n", add_special_tokens=False)
    rows = [json.loads(line) for line in conversations.read_text().splitlines() if line.strip()]
    checked, mismatches, builtin_differs = 0, [], 0

    def template(messages: list[Any], which: str | None, prompt: bool) -> list[int]:
        return list(
            tok.apply_chat_template(
                messages,
                chat_template=which,
                tokenize=True,
                add_generation_prompt=prompt,
                return_dict=False,
            )
        )

    for n, row in enumerate(rows):
        messages = row["messages"]
        model_input, _weights = renderer.build_supervised_example(messages)
        # the template ends every turn with "\n"; a supervised example ends at <|im_end|>
        got = model_input.to_ints() + newline
        for name, which in (("smollm2", SMOLLM2_TEMPLATE), ("folder", None)):
            if got != template(messages, which, prompt=False):
                mismatches.append({"row": n, "template": name, "kind": "supervised"})
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prefix = messages[:i]
            checked += 1
            prompt = renderer.build_generation_prompt(prefix).to_ints()
            for name, which in (("smollm2", SMOLLM2_TEMPLATE), ("folder", None)):
                if prompt != template(prefix, which, prompt=True):
                    mismatches.append({"row": n, "template": name, "kind": "prompt", "turn": i})
            if builtin.build_generation_prompt(prefix).to_ints() != prompt:
                builtin_differs += 1
    stop = renderer.get_stop_sequences()
    return {
        "conversations": len(rows),
        "with_system": sum(1 for r in rows if r["messages"][0]["role"] == "system"),
        "prompts_checked": checked,
        "mismatches": mismatches,
        "qwen3_instruct_prompts_differing": builtin_differs,
        "stop_is_eos": list(stop) == [tok.eos_token_id],
    }


if __name__ == "__main__":
    import tinker_cookbook

    default = Path(tinker_cookbook.__file__).parent / "example_data" / "conversations.jsonl"
    path = Path(sys.argv[2]) if len(sys.argv) > 2 else default
    print(json.dumps(check(sys.argv[1], path)))
