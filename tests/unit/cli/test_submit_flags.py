"""`artfleet jobs submit`'s flags: the training-script names (--base-model, --project,
--max-context-tokens, --max-concurrent) and the GRPO knobs reach the submitted spec,
derived from the spec models; bad values are exit 2 naming the spec key. The trainer here
is an in-process Trainer servicer on a real gRPC server that keeps what it was sent."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from typer.testing import CliRunner

from artfleet.specs.job import JobSpecModel, spec_from_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.main import app

TOKEN = "submit-flags-token"


class KeepingTrainer(trainer_pb2_grpc.TrainerServicer):
    def __init__(self) -> None:
        self.specs: list[pb.JobSpec] = []

    def SubmitJob(self, request: trainer_pb2.SubmitJobRequest, context: object) -> pb.Job:
        self.specs.append(request.spec)
        return pb.Job(id="job-1", spec=request.spec)


@pytest.fixture
def trainer() -> Iterator[tuple[str, KeepingTrainer]]:
    from concurrent.futures import ThreadPoolExecutor

    servicer = KeepingTrainer()
    server = grpc.server(ThreadPoolExecutor(2))
    trainer_pb2_grpc.add_TrainerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(None)


def _submit(target: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["jobs", "submit", *args, "--target", target], env={"ARTFLEET_API_TOKEN": TOKEN}
    )
    return result.exit_code, result.output


def test_training_script_flags_and_grpo_knobs_reach_the_spec(
    trainer: tuple[str, KeepingTrainer],
) -> None:
    target, servicer = trainer
    code, output = _submit(
        target,
        *("--base-model", "smollm2-135m-instruct", "--project", "rlm-training"),
        *("--max-context-tokens", "4096", "--max-concurrent", "3"),
        *("--loss-fn", "ppo", "--epsilon", "0.3", "--no-scale-rewards"),
        *("--kl-penalty-coef", "0.1", "--temperature", "1.0"),
    )
    assert code == 0, output
    spec = spec_from_proto(servicer.specs[-1])
    assert (spec.project, spec.max_context_tokens, spec.max_concurrent) == ("rlm-training", 4096, 3)
    assert spec.grpo.set_fields() == {
        "loss_fn": "ppo",
        "epsilon": 0.3,
        "scale_rewards": False,
        "kl_penalty_coef": 0.1,
    }
    assert spec.temperature == 1.0
    # Unset flags leave the model's defaults (nothing copied into the CLI).
    assert spec.max_tokens == JobSpecModel.model_fields["max_tokens"].default


# The flags users' scripts type (the training scripts' names among them), each with the
# spec value it sets: derived from the spec like the rest, under the names they always had.
SCRIPT_FLAGS = {
    "--model": ("base_model", "my-model"),
    "--env": ("environment", "code-fix"),
    "--name": ("name", "n1"),
    "--steps": ("steps", 5),
    "--groups-per-step": ("groups_per_step", 3),
    "--rollouts-per-group": ("rollouts_per_group", 2),
    "--learning-rate": ("learning_rate", 1e-4),
    "--max-turns": ("max_turns", 2),
    "--seed": ("seed", 7),
    "--backend": ("backend", "art"),
    "--max-steps-off-policy": ("max_steps_off_policy", 1),
    "--experiment-name": ("experiment", "e1"),
    "--eval-every-steps": ("eval_every_steps", 2),
    "--keep-last": ("keep_last", 1),
    "--log-sample-rate": ("log_sample_rate", 0.5),
    "--dataset-size": ("dataset_size", 10),
    "--num-epochs": ("num_epochs", 2),
}


def test_the_flags_scripts_type_set_their_spec_keys(trainer: tuple[str, KeepingTrainer]) -> None:
    target, servicer = trainer
    args = [str(a) for flag, (_, value) in SCRIPT_FLAGS.items() for a in (flag, value)]
    code, output = _submit(target, *args, "--offline-data", "/data/samples.json")
    assert code == 0, output
    spec = spec_from_proto(servicer.specs[-1])
    assert {key: getattr(spec, key) for key, _ in SCRIPT_FLAGS.values()} == dict(
        SCRIPT_FLAGS.values()
    )
    assert spec.sft is not None and spec.sft.data_path == "/data/samples.json"
    # The other names of three of them.
    code, output = _submit(
        target,
        *("--base-model", "other", "--experiment", "e2", "--sft-data", "/data/m.jsonl"),
    )
    assert code == 0, output
    spec = spec_from_proto(servicer.specs[-1])
    assert (spec.base_model, spec.experiment) == ("other", "e2")
    assert spec.sft is not None and spec.sft.data_path == "/data/m.jsonl"


def test_finetune_full_reaches_the_spec_and_lora_is_the_default(
    trainer: tuple[str, KeepingTrainer],
) -> None:
    target, servicer = trainer
    code, output = _submit(target, "--finetune", "full")
    assert code == 0, output
    assert servicer.specs[-1].finetune == "full"
    assert spec_from_proto(servicer.specs[-1]).finetune == "full"
    code, output = _submit(target)
    assert code == 0, output
    assert spec_from_proto(servicer.specs[-1]).finetune == "lora"


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["--loss-fn", "sgd"], "grpo.loss_fn"),
        (["--max-concurrent", "-1"], "max_concurrent"),
        (["--max-context-tokens", "10"], "max_context_tokens"),
        (["--finetune", "partial"], "finetune"),
        (["--finetune", "full", "--backend", "art"], "finetune"),  # ART's backend is LoRA
    ],
)
def test_a_bad_flag_value_is_exit_2_naming_the_key(
    trainer: tuple[str, KeepingTrainer], args: list[str], key: str
) -> None:
    target, servicer = trainer
    code, output = _submit(target, *args)
    assert code == 2 and key in output and not servicer.specs
