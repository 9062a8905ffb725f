"""What each queued call of the Tinker-compatible API does on the torch backend's training
clients: the proto op in, the proto result out. Errors are raised (ArtfleetError); the
service turns them into the future's failure."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from artfleet.contracts.errors import InvalidArgument, NotFound
from artfleet.v1 import tinker_api_pb2 as pb
from artfleet_trainer import metrics
from artfleet_trainer.torch_backend import checkpoints, datum_training
from artfleet_trainer.torch_backend.training_clients import AdamParams, TrainingClients

from .engine import Base
from .runs import RunRecord, Runs, SavedWeights, run_name, tinker_path
from .sessions import Sampler, Sessions

KEEP_UNNAMED = 2  # the latest checkpoints kept without a name (a sampler may still ask)


def datums_of(op: pb.ForwardBackwardOp) -> list[datum_training.Datum]:
    return [
        datum_training.Datum(
            list(d.tokens), list(d.target_tokens), {k: list(v.values) for k, v in d.inputs.items()}
        )
        for d in op.data
    ]


def adam_of(op: pb.OptimStepOp) -> AdamParams:
    a = op.adam
    return AdamParams(a.learning_rate, a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_clip_norm)


@dataclass
class Calls:
    clients: TrainingClients
    runs: Runs
    sessions: Sessions
    last_step: dict[str, float] = field(default_factory=dict)  # run -> its last optim_step

    async def forward_backward(
        self,
        model_id: str,
        op: pb.ForwardBackwardOp,
        datums: list[datum_training.Datum],
        spec: datum_training.LossSpec,
    ) -> pb.RetrieveResponse:
        """`datums` are `op`'s, checked at the request (`spec`: their loss)."""
        outputs = await self.clients.forward_backward(
            run_name(model_id),
            datums,
            spec,
            dict(op.loss_fn_config),
            forward_only=op.forward_only,
        )
        if not op.forward_only:
            tokens = sum(len(d.tokens) for d in datums)
            metrics.TINKER_TOKENS.labels(run=model_id).inc(tokens)
            metrics.TINKER_LOSS.labels(run=model_id).set(outputs.loss_sum / max(tokens, 1))
        result = pb.ForwardBackwardResult(metrics=outputs.metrics())
        for logprobs in outputs.logprobs:
            result.logprobs.add(values=logprobs)
        return pb.RetrieveResponse(forward_backward=result)

    async def optim_step(self, model_id: str, op: pb.OptimStepOp) -> pb.RetrieveResponse:
        applied = await self.clients.optim_step(run_name(model_id), adam_of(op))
        now = time.monotonic()
        if model_id in self.last_step:
            metrics.TINKER_STEP_SECONDS.observe(now - self.last_step[model_id])
        self.last_step[model_id] = now
        metrics.TINKER_OPTIM_STEPS.labels(run=model_id).inc()
        return pb.RetrieveResponse(optim_step=pb.OptimStepResult(metrics=applied))

    async def save(self, model_id: str, kind: str, name: str, overwrite: bool) -> SavedWeights:
        """Saves the client's weights and records them as `<kind>/<name>` of its run."""
        record = self.runs.get(model_id)
        checkpoint_id = f"{kind}/{name}"
        if "/" in name or not name:
            raise InvalidArgument(f"{name!r} is not a checkpoint name (no '/')", "path")
        existing = record.save_named(checkpoint_id)
        if existing is not None and not overwrite:
            raise InvalidArgument(f"{checkpoint_id} exists in this run; pass overwrite", "path")
        step = await self.clients.save(run_name(model_id))
        saved = SavedWeights(checkpoint_id, step, time.time())
        record.saves = [s for s in record.saves if s.checkpoint_id != checkpoint_id] + [saved]
        record.last_request_time = saved.time
        self.runs.write(record)
        await self.retain(model_id, record)
        return saved

    async def save_weights(self, model_id: str, op: pb.SaveWeightsOp) -> pb.RetrieveResponse:
        saved = await self.save(model_id, "weights", op.name, op.overwrite)
        path = tinker_path(model_id, saved.checkpoint_id)
        return pb.RetrieveResponse(save=pb.SaveResult(path=path))

    async def save_for_sampler(self, model_id: str, op: pb.SaveForSamplerOp) -> pb.RetrieveResponse:
        if op.name:
            saved = await self.save(model_id, "sampler_weights", op.name, overwrite=True)
            path = tinker_path(model_id, saved.checkpoint_id)
            return pb.RetrieveResponse(save=pb.SaveResult(path=path))
        if not op.HasField("sampling_session_seq_id"):
            raise InvalidArgument("name a checkpoint or a sampling session", "path")
        step = await self.clients.save(run_name(model_id))
        session = self.sessions.get(model_id.split(":", 1)[0])
        sampler_id = f"{session.session_id}:sample:{op.sampling_session_seq_id}"
        record = self.runs.get(model_id)
        served = f"{run_name(model_id)}@{step}"
        context = self.clients.info(run_name(model_id)).max_context
        session.samplers[sampler_id] = Sampler(sampler_id, record.base_model, "", served, context)
        await self.retain(model_id, record)
        return pb.RetrieveResponse(save=pb.SaveResult(sampling_session_id=sampler_id))

    async def retain(self, model_id: str, record: RunRecord) -> None:
        """The fleet's retention for a run: the checkpoints its named saves are, those a
        live sampling session samples, and the last `KEEP_UNNAMED` stay; the others (the
        ephemeral saves of earlier steps) are deleted and no longer served."""
        name = run_name(model_id)
        steps = self.runs.steps_on_disk(model_id)
        keep = {s.step for s in record.saves} | set(steps[-KEEP_UNNAMED:]) | {0}
        for session in self.sessions.all():
            for sampler in session.samplers.values():
                served, _, at = sampler.served_name.rpartition("@")
                if served == name and at.isdigit():
                    keep.add(int(at))
        if self.clients.loaded(name):
            keep.add(self.clients.served_step(name))
        for step in checkpoints.delete_checkpoints(self.runs.model_dir(model_id), keep):
            await self.clients.retire(name, step)

    async def load(self, model_id: str, op: pb.LoadWeightsOp) -> pb.RetrieveResponse:
        _, _, folder = self.runs.resolve(op.path)
        await self.clients.load(run_name(model_id), folder, optimizer=op.optimizer)
        return pb.RetrieveResponse(load=pb.LoadResult(model_id=model_id, path=op.path))

    async def create(
        self, session_id: str, model_id: str, base: Base, op: pb.CreateModelOp
    ) -> pb.RetrieveResponse:
        """`op.base_model` as the client names it (its tokenizer's name, what the run
        lists); `base`: what the trainer loads for it."""
        seed = op.seed if op.HasField("seed") else None
        await self.clients.create(run_name(model_id), base.name, op.rank, seed, base.context)
        try:
            record = self.runs.get(model_id)  # a client created again (after a restart)
        except NotFound:
            record = RunRecord(model_id, op.base_model, op.rank, dict(op.user_metadata))
        self.runs.write(record)
        self.sessions.get(session_id).clients.add(model_id)
        return pb.RetrieveResponse(create_model=pb.CreateModelResult(model_id=model_id))
