"""Run by tinker-cookbook 0.6.1's own interpreter (a virtualenv of its own, made by the
test): the cookbook's supervised training loop (`tinker_cookbook.supervised.train.main`,
what its `sl_basic` recipe runs) on the conversations the cookbook ships
(`example_data/conversations.jsonl`, with `FromConversationFileBuilder`), three steps of
four conversations, a held-out set of four scored before step 0 through a sampling client
(the loop's own SamplerNLLEvaluator), a periodic checkpoint at step 2 and the final one.
Then the final sampler weights answer a prompt. Prints one JSON object of what the test
checks. Reads TINKER_BASE_URL and TINKER_API_KEY.

argv: BASE_MODEL TOKENIZER_FOLDER LOG_PATH"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import smollm2
import tinker
import tinker_cookbook
from tinker_cookbook import renderers, tokenizer_utils
from tinker_cookbook.supervised import train
from tinker_cookbook.supervised.data import FromConversationFileBuilder
from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

BASE_MODEL, TOKENIZER_FOLDER, LOG_PATH = sys.argv[1:4]
CONVERSATIONS = Path(tinker_cookbook.__file__).parent / "example_data" / "conversations.jsonl"


def config() -> train.Config:
    common = ChatDatasetBuilderCommonConfig(
        model_name_for_tokenizer=BASE_MODEL,
        renderer_name=smollm2.RENDERER,
        max_length=512,
        batch_size=4,
        train_on_what=renderers.TrainOnWhat.ALL_ASSISTANT_MESSAGES,
    )
    dataset = FromConversationFileBuilder(
        common_config=common, file_path=str(CONVERSATIONS), test_size=4
    )
    return train.Config(
        log_path=LOG_PATH,
        model_name=BASE_MODEL,
        recipe_name="artfleet_cookbook_sft",
        renderer_name=smollm2.RENDERER,
        dataset_builder=dataset,
        learning_rate=2e-4,
        lr_schedule="linear",
        lora_rank=8,
        save_every=2,
        eval_every=10,  # step 0 only
        max_steps=3,
    )


def jsonl(name: str) -> list[dict[str, Any]]:
    path = Path(LOG_PATH) / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    smollm2.register(TOKENIZER_FOLDER, BASE_MODEL)
    # The loop prices a run from a file on tinker-docs.thinkingmachines.ai (and goes on
    # without it when that fails): nothing is fetched from outside here.
    train.fetch_model_pricing = lambda *_a, **_k: None
    asyncio.run(train.main(config()))

    metrics = [row for row in jsonl("metrics.jsonl") if "train_mean_nll" in row]
    checkpoints = jsonl("checkpoints.jsonl")
    final = checkpoints[-1]
    model_id = final["state_path"].removeprefix("tinker://").split("/")[0]

    # After the loop, as a user would: the final sampler weights answer a prompt.
    service = tinker.ServiceClient()
    tokenizer = tokenizer_utils.get_tokenizer(BASE_MODEL)
    renderer = renderers.get_renderer(smollm2.RENDERER, tokenizer)
    prompt = renderer.build_generation_prompt(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    sampler = service.create_sampling_client(model_path=final["sampler_path"])
    params = tinker.SamplingParams(max_tokens=8, seed=3, stop=renderer.get_stop_sequences())
    sampled = sampler.sample(prompt, 1, params).result().sequences[0]
    listed = service.create_rest_client().list_checkpoints(model_id).result()
    print(
        json.dumps(
            {
                "model_id": model_id,
                "steps": [
                    {
                        "step": row["step"],
                        "num_sequences": row["num_sequences"],
                        "num_loss_tokens": row["num_loss_tokens"],
                        "train_mean_nll": row["train_mean_nll"],
                        "learning_rate": row["learning_rate"],
                        "test_nll": row.get("test/nll"),
                    }
                    for row in metrics
                ],
                "checkpoints": [
                    {k: c.get(k) for k in ("name", "state_path", "sampler_path")}
                    for c in checkpoints
                ],
                "server_checkpoints": [c.checkpoint_id for c in listed.checkpoints],
                "final_sample_tokens": len(sampled.tokens),
                "final_sample_logprobs": len(sampled.logprobs or []),
                "final_sample": tokenizer.decode(sampled.tokens),
            }
        )
    )


if __name__ == "__main__":
    main()
