"""The torch backend on N ranks: a torch.distributed process group, data parallel over the
packed rows of each step, the base sharded with FSDP2.

torchrun (`torch.distributed.run`) starts the ranks and sets their variables (RANK,
WORLD_SIZE, LOCAL_RANK, the c10d store); nothing here launches a process or implements a
collective. Rank 0 is the trainer service (its backend, its jobs, its checkpoints); every
other rank is a follower (`rank_follower.py`) that holds the same tenants and runs the same
model work, announced by rank 0 on its torch thread just before rank 0 runs it, so every
rank meets every collective in the same order.

How the work is split:
- the frozen base is sharded per decoder layer (then the root) with FSDP2's
  `fully_shard`: each rank keeps 1/N of its bytes, a layer is all-gathered for its forward
  (and again for its backward) and freed after;
- a tenant's LoRA adapter is replicated on every rank (a few MiB: sharding it would save
  nothing and it would tie each tenant's adapter to one FSDP layout, while tenants come
  and go on the one sharded base); its gradients are summed over the ranks before each
  optimizer step, so every rank takes the same step and holds the same adapter and AdamW
  state, which rank 0 alone saves, in today's layout;
- each optimizer step's rows are dealt round-robin; a rank with fewer rows runs a copy of
  one with weight 0, because every rank must run as many forwards and backwards as the
  others (FSDP all-gathers in each). Losses are scaled by the step's global row count, so
  the summed gradient is one rank's gradient on the same rows.
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from artfleet.contracts.errors import Unavailable

from .worker import available_cores

log = logging.getLogger(__name__)

# The command channel waits as long as the service is idle (a trainer with no job for
# days); the model work's collectives time out after `collective_timeout_s`.
COMMAND_TIMEOUT = datetime.timedelta(days=365)
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
COLLECTIVE_MARKERS = ("gloo", "NCCL", "Connection closed by peer", "Timed out waiting")


@dataclass(frozen=True)
class RankOp:
    """One piece of model work every rank runs: its name (rank_follower.OPS) and its
    arguments, picklable (model names, tensors, configs; never a live object)."""

    name: str
    args: tuple[Any, ...] = ()


STOP = RankOp("stop")


@dataclass(frozen=True)
class Share:
    """One row of an optimizer step on this rank: its index in the step's rows and
    whether it counts (False: a copy run with weight 0 to keep the ranks in step)."""

    index: int
    counts: bool = True


class RankGroup:
    """This process's place in the group (`start()` joins it, `stop()` leaves it)."""

    def __init__(
        self, rank: int, world: int, local_rank: int, local_world: int, timeout_s: float
    ) -> None:
        self.rank, self.world = rank, world
        self.local_rank, self.local_world = local_rank, local_world
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self._commands: Any = None
        self.mesh: Any = None
        self._sharded: weakref.WeakSet[Any] = weakref.WeakSet()  # FSDP units (bases go)
        self.broken = False  # a collective failed: the group must restart (torchrun)

    @classmethod
    def from_env(cls, timeout_s: float) -> RankGroup | None:
        """The group torchrun started this process in; None outside one (or alone)."""
        if any(name not in os.environ for name in LAUNCH_VARIABLES):
            return None
        world = int(os.environ["WORLD_SIZE"])
        if world < 2:
            return None
        return cls(
            int(os.environ["RANK"]),
            world,
            int(os.environ["LOCAL_RANK"]),
            int(os.environ["LOCAL_WORLD_SIZE"]),
            timeout_s,
        )

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def device(self, configured: str) -> str:
        """A rank's device: its own GPU (`cuda:LOCAL_RANK`) when the backend's is CUDA."""
        return f"cuda:{self.local_rank}" if configured.startswith("cuda") else configured

    @property
    def local_device(self) -> torch.device:
        """This rank's device (its mesh's): where FSDP moves the units it shards."""
        return torch.device(self.device(self.mesh.device_type))

    def cpu_threads(self) -> int:
        """A CPU rank's share of the node's cores (ranks on one node split them)."""
        return max(1, available_cores() // self.local_world)

    def start(self, device: str) -> None:
        """Join the group (blocks until every rank has: torchrun's rendezvous)."""
        from torch.distributed.device_mesh import init_device_mesh

        cuda = device.startswith("cuda")
        if cuda:
            torch.cuda.set_device(self.local_rank)
        dist.init_process_group(
            "nccl" if cuda else "gloo",
            store=self._store(),
            rank=self.rank,
            world_size=self.world,
            timeout=self.timeout,
        )
        self._commands = dist.new_group(backend="gloo", timeout=COMMAND_TIMEOUT)
        self.mesh = init_device_mesh("cuda" if cuda else "cpu", (self.world,))
        log.info("rank %d of %d joined the group (%s)", self.rank, self.world, device)

    def _store(self) -> Any:
        """The group's c10d store: torchrun's (its agent on node 0 serves it), under a
        prefix of this attempt. torchrun's static rendezvous keeps one store across the
        group's restarts, where the ranks of the attempt before left their addresses:
        without the prefix a restarted rank could read a dead peer's and fail to connect."""
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            world_size=self.world,
            is_master=self.leader and not agent,
            timeout=self.timeout,
        )
        return dist.PrefixStore(f"artfleet/attempt-{attempt}", store)

    def stop(self) -> None:
        """Rank 0 tells the followers to leave, then every rank leaves the group. A rank
        already gone (torchrun is ending the group because one died) is no error here."""
        if not dist.is_initialized():
            return
        try:
            if self.leader:
                self.announce(STOP)
        except (RuntimeError, dist.DistBackendError) as exc:
            log.warning("rank %d leaves a broken group: %s", self.rank, exc)
        dist.destroy_process_group()

    def lost(self, exc: BaseException) -> Unavailable | None:
        """Rank 0: `exc`, raised by model work, as the error its caller gets when it says
        the group broke (a rank died or a collective timed out); None when it does not.
        The group is then marked broken: the trainer stops and exits with a failure, so
        torchrun restarts every rank, and jobs resume from their last checkpoint (their
        runner keeps them RUNNING through an `Unavailable`)."""
        if not is_collective_failure(exc):
            return None
        if not self.broken:
            log.error("the trainer's ranks broke (%s); the group restarts", exc)
            self.broken = True
            if self.leader:  # its graceful stop, then a failed exit: torchrun restarts all
                os.kill(os.getpid(), signal.SIGTERM)
        return Unavailable(f"the trainer's ranks lost one ({exc}); they restart, retry later")

    # --- the command channel ----------------------------------------------------------

    def announce(self, op: RankOp) -> None:
        """Rank 0: every follower runs `op` next (called on rank 0's torch thread)."""
        dist.broadcast_object_list([op], src=0, group=self._commands)
        self.reshard()

    def receive(self) -> RankOp:
        """A follower: the next op rank 0 announced."""
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=self._commands)
        op = box[0]
        if not isinstance(op, RankOp):
            raise RuntimeError(f"rank 0 announced {op!r}, not a RankOp")
        self.reshard()
        return op

    # --- the model work's collectives -----------------------------------------------------

    def shard(self, model: Any) -> None:
        """FSDP2 over the frozen base: each decoder layer, then the decoder (embeddings
        and final norm) as the root, before any adapter (peft then wraps the sharded
        Linears). The output head stays whole on every rank: the loss reads its weight
        outside any forward (training.compute_logprobs chunks the head's product), so a
        head tied to the embeddings gets a frozen copy of its own."""
        from torch.distributed.fsdp import fully_shard

        for param in model.parameters():
            param.requires_grad_(False)
        head, embed = model.get_output_embeddings(), model.get_input_embeddings()
        if head is not None and head.weight is embed.weight:
            head.weight = torch.nn.Parameter(embed.weight.detach().clone(), requires_grad=False)
        for layer in decoder_layers(model):
            self._sharded.add(fully_shard(layer, mesh=self.mesh))
        self._sharded.add(fully_shard(model.get_decoder(), mesh=self.mesh))
        place_unsharded(model, self.local_device)

    def shard_full(self, root: torch.nn.Module, decoder_units: list[torch.nn.Module]) -> None:
        """FSDP2 over a full fine-tune (full_model.py), every weight trainable: each
        decoder layer, then `root` (the rest: embeddings, final norm, head). Gradients are
        summed, not averaged: the loss is already scaled by the step's global row count.
        On CUDA the weights are kept in fp32 and computed in bf16 (FSDP's mixed precision:
        gathered in bf16, gradients reduced in fp32)."""
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy()
        if self.mesh.device_type == "cuda":
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        units = [fully_shard(unit, mesh=self.mesh, mp_policy=policy) for unit in decoder_units]
        units.append(fully_shard(root, mesh=self.mesh, mp_policy=policy))
        place_unsharded(root, self.local_device)
        for unit in units:
            unit.set_gradient_divide_factor(1.0)  # a sum (gloo has no pre-scaled sum)
            unit.set_force_sum_reduction_for_comms(True)
            self._sharded.add(unit)

    def reshard(self) -> None:
        """Every sharded unit back to its shard (local, no collective), so each op starts
        from the same state on every rank: FSDP keeps the root gathered after a forward
        (for its backward), and a forward with no backward, or a save on rank 0 alone
        (state_dict reshards), would leave the ranks gathering different units next."""
        for unit in list(self._sharded):
            unit.reshard()

    def share(self, count: int) -> list[Share]:
        """This rank's rows of a step's `count` rows: every world-th from its rank, padded
        with a weight-0 copy of row 0 to the most any rank runs."""
        mine = [Share(i) for i in range(self.rank, count, self.world)]
        most = -(-count // self.world)
        return mine + [Share(0, counts=False)] * (most - len(mine))

    def reduce_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Sum the replicated adapter's gradients over the ranks (one flat all-reduce).
        Sharded parameters (DTensors: a full fine-tune's) are left out: FSDP has
        reduce-scattered theirs in the backward pass."""
        params = [p for p in params if not is_sharded(p)]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        offset = 0
        for param, grad in zip(params, grads, strict=True):
            size = grad.numel()
            param.grad = flat[offset : offset + size].view_as(grad).clone()
            offset += size

    def sync_from_leader(self, params: Sequence[torch.nn.Parameter], state: Any) -> Any:
        """Rank 0's adapter weights into every rank's (in place) and rank 0's `state`
        (an optimizer state dict, or None) returned on every rank."""
        with torch.no_grad():
            for param in params:
                dist.broadcast(param.data, src=0)
        box = [state if self.leader else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order, on every rank."""
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, value)
        return out


def shares(count: int, ranks: RankGroup | None) -> list[Share]:
    """The rows of `count` this process runs: all of them alone, else its rank's share."""
    return [Share(i) for i in range(count)] if ranks is None else ranks.share(count)


def is_collective_failure(exc: BaseException) -> bool:
    """A collective failed: torch's own error for it, or gloo's and NCCL's transport errors
    (torch 2.13 raises some as plain RuntimeErrors naming their library)."""
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(m in text for m in COLLECTIVE_MARKERS)


def place_unsharded(module: torch.nn.Module, device: torch.device) -> None:
    """What FSDP left whole (a LoRA base's output head, buffers outside its units) to
    `device`, as FSDP moved its units' weights there (a base is read into host memory
    on CUDA ranks: TorchBackend.load_device)."""
    # old tensor's id -> (it, kept alive so no id is reused; its copy on `device`)
    moved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for sub in module.modules():
        tables: tuple[dict[str, Any], ...] = (sub._parameters, sub._buffers)
        for table in tables:
            for name, tensor in table.items():
                if tensor is None or is_sharded(tensor) or tensor.device == device:
                    continue
                if id(tensor) not in moved:  # a tensor two modules share stays shared
                    on_device = tensor.detach().to(device)
                    if isinstance(tensor, torch.nn.Parameter):
                        on_device = torch.nn.Parameter(on_device, tensor.requires_grad)
                    moved[id(tensor)] = (tensor, on_device)
                table[name] = moved[id(tensor)][1]


def is_sharded(param: torch.Tensor) -> bool:
    """A parameter FSDP shards (a DTensor)."""
    from torch.distributed.tensor import DTensor

    return isinstance(param, DTensor)


def decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The transformer blocks of a causal LM (`model.model.layers` in every HF decoder
    this project loads), the units FSDP shards and gathers one at a time."""
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}'s decoder has no layers to shard")
    return list(layers)
