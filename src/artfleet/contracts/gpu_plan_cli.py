"""`python -m artfleet.contracts.gpu_plan`: the GPU plans' docs tables, and one model's plan
on one GPU (`gpu_plan.plan_gpu`) or on several (`gpus_plan.plan_gpus`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from artfleet.contracts import gpus_plan
from artfleet.contracts.gpu_plan import (
    H100_80GB_BYTES,
    QWEN3,
    MiB,
    markdown_table,
    plan_gpu,
    read_config,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m artfleet.contracts.gpu_plan")
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="the Qwen3 table, as in docs/deployment.md (the default)",
    )
    parser.add_argument("--config", type=Path, help="a model folder or its config.json")
    parser.add_argument(
        "--gpu-mib", type=int, default=H100_80GB_BYTES // MiB, help="the GPU's memory.total"
    )
    several = parser.add_argument_group("the trainer on several GPUs (gpus_plan)")
    several.add_argument("--gpus", type=int, help="GPUs in all: FSDP2 ranks beside vLLM")
    several.add_argument("--finetune", choices=("lora", "full"), help="default: lora")
    several.add_argument("--split", action="store_true", help="vLLM on GPUs of its own")
    several.add_argument("--vllm-gpus", type=int, help="with --split: vLLM's GPUs")
    several.add_argument(
        "--markdown-multi",
        action="store_true",
        help="the several-GPU table (on --gpus, 8 by default), as in docs/deployment.md",
    )
    return parser


def _config_or_exit(parser: argparse.ArgumentParser, path: Path) -> dict[str, Any]:
    try:
        return read_config(path)
    except (OSError, ValueError) as error:
        parser.error(f"--config {path}: {error}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        print(_output(parser, args))
    except ValueError as error:  # a config without a key the plan reads, a plan's bad input
        parser.error(str(error))
    return 0


def _output(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    total = args.gpu_mib * MiB
    if args.markdown_multi:
        return gpus_plan.markdown_table(gpus=args.gpus or 8, gpu_total_bytes=total)
    if args.gpus is None and (args.finetune or args.split or args.vllm_gpus is not None):
        parser.error("--finetune, --split and --vllm-gpus go with --gpus")
    if args.config is None:
        if args.gpus is not None:
            parser.error("--gpus plans one model: give its --config")
        return markdown_table(QWEN3, total)
    config = _config_or_exit(parser, args.config)
    if args.gpus is None:
        return json.dumps(plan_gpu(config, total).as_dict(), indent=2)
    plan = gpus_plan.plan_gpus(
        config,
        args.gpus,
        total,
        finetune=args.finetune or "lora",
        colocate=not args.split,
        vllm_gpus=args.vllm_gpus,
    )
    return json.dumps(plan.as_dict(), indent=2)
