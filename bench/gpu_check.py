"""Device check: does the trainer's step run right, and how fast, on this device?

    python3 bench/gpu_check.py --preset cpu-tiny --out DIR      # CI (a slow test)
    python3 bench/gpu_check.py --preset gpu --out DIR [--wheels DIR] [--deadline-s 450]
    python3 bench/gpu_check.py --preset gpu --world 8 --out DIR     # every GPU of a machine

`cpu-tiny`: a random-init tiny Qwen3 through `TorchBackend` in fp32, in bf16, and in bf16
with every layer checkpointed; each must keep the loss finite, change the LoRA by the
learning rate, save an adapter equal to the live weights and an optimizer state that
reloads. Only those correctness lines.

`gpu`: the same checks once on CUDA (Qwen3-0.6B's shape), then for Qwen3-shaped random-init
models (0.6B, 4B, 8B; no weights travel) 8 groups x 8 rollouts packed into ~8 rows of
~1.9k tokens: our full GRPO step, its core, a plain peft step on the same packed batch,
peak memory against the trainer's share (0.6 of the GPU: vLLM has 0.4), generation
tokens/s at batch 64; then each model's core step in fp32. The trainer's share is
enforced (`set_per_process_memory_fraction`), so an OOM here predicts one beside vLLM.

Every run is its own process with what is left of the deadline: an OOM, a crash or a
timeout is a result (`status`), and `DIR/gpu_check.json` is rewritten after each run.
`--wheels DIR`: the packages a bare torch + transformers + peft machine lacks, unpacked
into a private site dir first (`make gpu-check` fetches them and prints the command).

`--world N` runs each run on N ranks (torchrun on this machine, one rank a GPU, gloo on a
CPU: torch_backend/ranks.py), the base sharded and the rows dealt to them: the correctness
checks as they are, and each measuring run's full step (`TorchBackend.train`) alone. Its
core and plain sides and the generation rate call the model from rank 0 alone, which a
sharded model cannot answer.

Last lines (`DIR/gpu_check.log` too), per model: `<model>.train_step_ratio=` (our core step
/ the plain peft step; target <= 1.15), `.tokens_per_s=`, `.mfu=`, `.peak_gib=` (must be <=
`.share_gib=`), `.fp32_vs_bf16_step_ratio=`; cpu-tiny: `<run>.ok=` and its checks.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARE = 0.6  # the trainer's part of a GPU it shares with vLLM at 0.4
GPU_MODELS = ("Qwen3-0.6B", "Qwen3-4B", "Qwen3-8B")
BATCH = {"groups": 8, "rollouts": 8, "tokens": 200}  # 64 trajectories, ~8 rows of ~1.9k


def preset_runs(preset: str, world: int = 1) -> list[dict[str, Any]]:
    """The runs of a preset, most important first (the deadline cuts the last ones); on
    `world` ranks, what runs there (the module's docstring)."""
    runs = _preset_runs(preset)
    if world == 1:
        return runs
    ranked = []
    for run in runs:
        if run["mode"] == "measure":
            if "full" not in run["sides"]:
                continue
            run = {**run, "sides": ["full"], "generate": 0}
        ranked.append({**run, "world": world})
    return ranked


def _preset_runs(preset: str) -> list[dict[str, Any]]:
    if preset == "cpu-tiny":
        tiny: dict[str, Any] = {"model": "tiny", "device": "cpu", "mode": "check"}
        tiny |= {"groups": 2, "rollouts": 2, "tokens": 24}
        return [
            {**tiny, "name": "tiny-fp32", "dtype": "fp32"},
            {**tiny, "name": "tiny-bf16", "dtype": "bf16"},
            {**tiny, "name": "tiny-bf16-checkpointed", "dtype": "bf16", "activation_budget": 0},
            # The measuring path once, so the GPU preset runs no code for the first time
            # there; a CPU's figures are not reported.
            {**tiny, "name": "tiny-measure", "dtype": "fp32", "mode": "measure"}
            | {"sides": ["full", "core", "plain"], "generate": 4, "generate_tokens": 4},
        ]
    cuda: dict[str, Any] = {"device": "cuda", "memory_fraction": SHARE}
    runs = [
        {**cuda, "name": "Qwen3-0.6B-check", "model": "Qwen3-0.6B", "dtype": "bf16"}
        | {"mode": "check", "groups": 2, "rollouts": 2, "tokens": 64}
    ]
    for model in GPU_MODELS:
        runs.append(
            {**cuda, **BATCH, "name": model, "model": model, "dtype": "bf16", "mode": "measure"}
            | {"sides": ["full", "core", "plain"], "generate": 64}
        )
    for model in GPU_MODELS:
        runs.append(
            {**cuda, **BATCH, "name": f"{model}-fp32", "model": model, "dtype": "fp32"}
            | {"mode": "measure", "sides": ["core"]}
        )
    return runs


# Imported by the step (through ART's package __init__) but never called by it, and too
# large to carry: replaced only where they are not installed. (Not Pillow, which ART's
# tokenizer imports: a stub would make transformers take vision for available; it travels.)
STUBS = {
    "polars/__init__.py": (
        "def __getattr__(name):\n"
        "    raise ImportError(f'polars is not installed here (polars.{name})')\n"
    ),
    "litellm/__init__.py": (
        "async def acompletion(*args, **kwargs):\n"
        "    raise RuntimeError('litellm is not installed here')\n"
    ),
    "litellm/types/__init__.py": "",
    "litellm/types/utils.py": (
        "class ModelResponse: ...\nclass Choices: ...\nclass Message: ...\nclass Usage: ...\n"
    ),
}


def prepare_site(wheels: Path | None, site: Path) -> None:
    """Unpack the carried wheels (plain zip archives) and write the stubs that are needed."""
    site.mkdir(parents=True, exist_ok=True)
    for wheel in sorted(wheels.glob("*.whl")) if wheels else []:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    sys.path.insert(0, str(site))
    for path, text in STUBS.items():
        top = path.split("/")[0]
        if importlib.util.find_spec(top) is None or (site / top).is_dir():
            target = site / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)


def child_env(site: Path) -> dict[str, str]:
    paths = [site, ROOT / "src", ROOT / "services" / "trainer", ROOT / "bench"]
    previous = os.environ.get("PYTHONPATH")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), *([previous] if previous else [])])
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return env


def run_one(
    spec: dict[str, Any], env: dict[str, str], timeout_s: float, scratch: Path
) -> dict[str, Any]:
    """One run in its own process group, its files under `scratch`; its failure is a result."""
    workdir = scratch / spec["name"]
    workdir.mkdir()
    out = workdir / "result.json"
    out.touch()
    launcher = [sys.executable]
    if spec.get("world", 1) > 1:  # torchrun: its c10d store on a free port of this machine
        launcher += ["-m", "torch.distributed.run", "--standalone"]
        launcher += [f"--nproc-per-node={spec['world']}"]
    argv = [
        *launcher,
        str(ROOT / "bench" / "gpu_check_run.py"),
        json.dumps(spec),
        str(out),
        str(workdir),
    ]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=max(timeout_s, 1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return {"status": "timeout", "seconds": time.monotonic() - started}
    tail = output.decode(errors="replace")[-3000:]
    result: dict[str, Any] = {"seconds": time.monotonic() - started}
    if proc.returncode == 0 and out.stat().st_size:
        result |= {"status": "ok", **json.loads(out.read_text())}
    elif "OutOfMemoryError" in tail or "CUDA out of memory" in tail:
        result |= {"status": "oom", "log_tail": tail}
    else:
        result |= {"status": "error", "returncode": proc.returncode, "log_tail": tail}
    return result


def environment(env: dict[str, str]) -> dict[str, Any]:
    """What the runs ran on (asked in a child: this process imports no torch)."""
    probe = (
        "import json, torch, transformers, peft; cuda = torch.cuda.is_available(); "
        "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
        "'transformers': transformers.__version__, 'peft': peft.__version__, "
        "'device': torch.cuda.get_device_name() if cuda else 'cpu', "
        "'total_gib': torch.cuda.mem_get_info()[1] / 2**30 if cuda else None}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode:
        return {"error": done.stderr[-2000:]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def summary(report: dict[str, Any]) -> list[str]:
    """The `name=value` lines: per model for the gpu preset, per run for cpu-tiny."""
    runs: dict[str, dict[str, Any]] = report["runs"]
    lines = []
    total = report["environment"].get("total_gib")
    for name, run in runs.items():
        if run.get("mode") == "check":
            lines += [f"{name}.status={run['status']}"]
            lines += [f"{name}.{k}={_fmt(run[k])}" for k in CHECK_KEYS if k in run]
            continue
        if name.endswith("-fp32"):
            continue
        lines.append(f"{name}.status={run['status']}")
        if run["status"] != "ok" or run["device"] == "cpu":
            continue
        peak = max(run.get(f"{s}_peak_gib") or 0.0 for s in ("full", "core"))
        values = {
            "train_step_ratio": run["core_s"] / run["plain_s"],
            "full_step_s": run["full_s"],
            "tokens_per_s": run["tokens_per_s"],
            "mfu": run.get("mfu"),
            "peak_gib": peak,
            "plain_peak_gib": run.get("plain_peak_gib"),
            "share_gib": SHARE * total if total else None,
            "generate_tokens_per_s": run.get("generate_tokens_per_s"),
        }
        fp32 = runs.get(f"{name}-fp32", {})
        fp32_s = fp32.get("core_s")
        values["fp32_vs_bf16_step_ratio"] = fp32_s / run["core_s"] if fp32_s else fp32.get("status")
        lines += [f"{name}.{k}={_fmt(v)}" for k, v in values.items()]
    return lines


CHECK_KEYS = (
    "ok",
    "loss",
    "lora_max_change",
    "checkpoint_equals_live",
    "optimizer_reloads",
    "checkpointed_layers",
)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write(out: Path, report: dict[str, Any]) -> None:
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2, sort_keys=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=("cpu-tiny", "gpu"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--wheels", type=Path, default=None)
    parser.add_argument("--deadline-s", type=float, default=450.0)
    parser.add_argument("--only", default="", help="comma-separated run names")
    parser.add_argument("--world", type=int, default=1, help="ranks a run (one a GPU)")
    args = parser.parse_args()
    deadline = time.monotonic() + args.deadline_s
    if args.world < 1:
        parser.error("--world must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    # The runs' models, checkpoints and the wheels' site: removed when the check ends
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        report = check(args, deadline, Path(scratch))
    lines = summary(report)
    (args.out / "gpu_check.log").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    # Correctness decides the exit status; a measuring run's OOM or timeout is a figure.
    checks = [r for r in report["runs"].values() if r.get("mode") == "check"]
    return 0 if all(r["status"] == "ok" and r.get("ok") for r in checks) else 1


def check(args: argparse.Namespace, deadline: float, scratch: Path) -> dict[str, Any]:
    """Every run of the preset in turn, the report written after each."""
    site = scratch / "site"
    prepare_site(args.wheels, site)
    env = child_env(site)
    report: dict[str, Any] = {
        "preset": args.preset,
        "world": args.world,
        "runs": {},
        "environment": environment(env),
    }
    write(args.out, report)
    wanted = set(filter(None, args.only.split(",")))
    for spec in preset_runs(args.preset, args.world):
        if wanted and spec["name"] not in wanted:
            continue
        left = deadline - time.monotonic()
        if left < 10:
            report["runs"][spec["name"]] = {**spec, "status": "skipped: deadline"}
            continue
        result = run_one(spec, env, left - 5, scratch)
        report["runs"][spec["name"]] = {**spec, **result}
        print(f"{spec['name']}: {result['status']} ({result['seconds']:.0f}s)", flush=True)
        write(args.out, report)
    return report


if __name__ == "__main__":
    sys.exit(main())
