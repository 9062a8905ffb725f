"""Which ART backend trains on this node: `torch` (CPU or any torch device) or `art` (GPU)."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from artfleet_trainer.settings import TrainerSettings

if TYPE_CHECKING:  # `import art` takes seconds: entrypoints that parse config stay light
    from artfleet.contracts.art_types import art

log = logging.getLogger(__name__)


class TrainerBackend(Protocol):
    """What the job runner needs of a backend; TorchBackend and the art backend implement
    it with public methods, so the runner calls no private ART method."""

    async def register_model(self, model: art.TrainableModel) -> None:
        """Make `model` trainable and served here (ART's `model.register(backend)`)."""

    async def current_step(self, model: art.TrainableModel) -> int:
        """The latest saved checkpoint's step (0 before any)."""

    async def discard_checkpoints_after(self, model: art.TrainableModel, step: int) -> list[int]:
        """Before `register_model`: delete the model's checkpoints past `step` (saved by a
        step never recorded) and forget any weights of theirs held here, so that the model
        registers at `step`. Returns the steps deleted."""

    async def train(
        self,
        model: art.TrainableModel,
        trajectory_groups: Iterable[art.TrajectoryGroup],
        *,
        learning_rate: float,
    ) -> art.types.TrainResult:
        """One step on the groups at the job's learning rate (no default here: the job
        spec's is the one default); saves checkpoint step+1 and serves it."""

    def train_sft(
        self,
        model: art.TrainableModel,
        trajectories: list[art.Trajectory],
        *,
        learning_rate: float,
        batch_size: int,
        max_length: int = 0,
    ) -> AsyncIterator[dict[str, float]]:
        """Supervised fine-tuning on the trajectories' assistant turns (ART's `_train_sft`),
        `batch_size` per optimizer step, yielding each batch's metrics (`loss/train`,
        `loss/learning_rate`, `loss/grad_norm`); then saves checkpoint step+1 and serves it."""
        ...

    async def close(self) -> None: ...


def backend_unavailable_reason(kind: str, configured: str) -> str:
    """ "" when this trainer runs `kind`; a trainer runs one backend, chosen at start."""
    if kind != configured:
        return (
            f"this trainer runs the {configured!r} backend; start one with "
            f"ARTFLEET_BACKEND={kind} to run {kind!r} jobs"
        )
    return ""


def check_cuda(device: str) -> None:
    """On a CUDA device: log the driver floor of this torch's CUDA build and the host's
    driver, and stop the start with a message naming both when CUDA is not usable (else the
    first `.to("cuda")` fails deep inside a job)."""
    if not device.startswith("cuda"):
        return
    import torch

    from artfleet.runtime.cuda_driver import (
        TorchCuda,
        cuda_problem,
        floor_line,
        read_driver_version,
    )

    facts = TorchCuda(torch.__version__, torch.version.cuda, torch.cuda.is_available())
    driver = read_driver_version()
    log.info("%s", floor_line("the trainer", facts, driver))
    problem = cuda_problem("the trainer", facts, driver)
    if problem is not None:
        raise SystemExit(problem)


def make_backend(kind: str, settings: TrainerSettings) -> TrainerBackend:
    if kind == "torch":
        return make_torch_backend(settings)
    if kind == "art":
        # vLLM is not importable here: ART 0.5.18 runs it from its own managed runtime (a
        # separate environment, art.vllm_runtime), so Unsloth is what marks the GPU image.
        if importlib.util.find_spec("unsloth") is None:
            raise RuntimeError(
                "the 'art' backend needs a GPU image with openpipe-art[backend] "
                "(Unsloth; vLLM in ART's managed runtime); use ARTFLEET_BACKEND=torch on CPU"
            )
        check_cuda("cuda")  # ART's LocalBackend trains on the GPU whatever ARTFLEET_DEVICE says
        from artfleet_trainer.backends.art_backend import make_art_backend

        return make_art_backend(settings)
    raise ValueError(f"unknown backend {kind!r} (torch, art)")


def make_torch_backend(settings: TrainerSettings) -> Any:
    """The torch backend the settings describe; under torchrun, this rank's: it joins the
    group first (torch_backend/ranks.py), and a follower rank serves nothing."""
    check_cuda(settings.device)
    from artfleet_trainer.torch_backend import TorchBackend
    from artfleet_trainer.torch_backend.rank_follower import NoServing
    from artfleet_trainer.torch_backend.ranks import RankGroup

    ranks = RankGroup.from_env(settings.train_collective_timeout_s)
    if ranks is not None:
        ranks.start(ranks.device(settings.device))
    if ranks is not None and not ranks.leader:
        serving: Any = NoServing()
    else:
        from artfleet_trainer.serving import make_serving

        serving = make_serving(settings)
    return TorchBackend(
        path=settings.art_path,
        device=settings.device,
        api_key=settings.api_token.get_secret_value(),
        cache_dir=settings.model_cache_dir or None,
        dtype=settings.dtype,
        train_num_threads=settings.train_num_threads,
        activation_budget_bytes=settings.train_activation_budget_bytes,
        memory_fraction=settings.train_memory_fraction,
        serving=serving,
        ranks=ranks,
    )
