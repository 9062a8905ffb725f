"""How the trainer process starts: alone, or as one rank of a group torchrun launches.

With `ARTFLEET_TRAIN_WORLD` above 1 the same command on every node (`python -m
artfleet_trainer`) runs torchrun (`torch.distributed.run`'s own entry point, static
rendezvous at node 0's `ARTFLEET_TRAIN_MASTER_ADDR:PORT`: node ranks are fixed, so rank 0,
the service, is always on node 0, the host its Service or port names). Under torchrun,
rank 0 runs the trainer service and every other rank follows it
(torch_backend/rank_follower.py). Settings are parsed before anything heavy is imported.
"""

from __future__ import annotations

import os
import sys

from artfleet_trainer.settings import TrainerSettings

UNDER_TORCHRUN = "TORCHELASTIC_RUN_ID"  # torchrun sets it in every rank's environment


def torchrun_args(settings: TrainerSettings) -> list[str]:
    """torchrun's arguments for this node's ranks of the group the settings describe."""
    return [
        f"--nnodes={settings.train_nodes}",
        f"--nproc-per-node={settings.train_world // settings.train_nodes}",
        f"--node-rank={settings.train_node_rank}",
        f"--master-addr={settings.train_master_addr}",
        f"--master-port={settings.train_master_port}",
        f"--max-restarts={settings.train_max_restarts}",
        "-m",
        "artfleet_trainer",
    ]


def run_ranks(settings: TrainerSettings) -> int:
    """This node's ranks under torchrun, until they end; a SIGTERM or SIGINT (a stop)
    ends them (torchrun passes it on, rank 0 stops the group) without torchrun's
    traceback. The exit status: 0 when stopped or done, torchrun's failure otherwise."""
    import signal

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    try:
        torchrun(torchrun_args(settings))
    except SignalException as stop:
        print(f"trainer ranks stopped ({signal.Signals(stop.sigval).name})", file=sys.stderr)
        return 0 if stop.sigval in (signal.SIGTERM, signal.SIGINT) else 1
    return 0


def role(settings: TrainerSettings) -> str:
    """`launch` (start torchrun), `service` (alone, or rank 0) or `follower`."""
    if settings.train_world > 1 and UNDER_TORCHRUN not in os.environ:
        return "launch"
    if int(os.environ.get("RANK", "0")) > 0:
        return "follower"
    return "service"


def follower_main(settings: TrainerSettings) -> None:
    """A follower rank: join the group, then run rank 0's model work until it stops.

    torchrun passes a SIGTERM to every rank at once; a follower lets rank 0 (the service,
    stopping gracefully) end the group, or dies with it when its connection breaks (and
    torchrun kills what still runs after its grace)."""
    import signal

    import torch

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    from artfleet_trainer.backends import make_torch_backend
    from artfleet_trainer.torch_backend.rank_follower import follow

    backend = make_torch_backend(settings)
    ranks = backend.ranks
    if torch.device(backend.device).type != "cuda":
        torch.set_num_threads(ranks.cpu_threads())
    follow(backend, ranks)
