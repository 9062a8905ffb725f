"""The NVIDIA driver a CUDA build of torch needs, and the start-up message when CUDA is not
usable.

The GPU images' torch (and vLLM) come as wheels built for one CUDA release (PyPI's torch
2.13.0: CUDA 13.0); the host's driver must be at least that release family's floor, or
`torch.cuda.is_available()` is False and the first `.to("cuda")` fails far from the cause.
The trainer and the inference service call `cuda_problem` at start, and print
`floor_line`. Torch-free: the trainer passes its own torch's facts, the inference service
asks vLLM's Python (`probe_torch`), since vLLM lives in an environment of its own.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# The minimum Linux driver per CUDA major release, with minor version compatibility (NVIDIA's
# "CUDA Compatibility" guide, table "CUDA Toolkit 11.x, 12.x, and 13.x Driver Version
# Ranges"): any 12.x wheel runs on >= 525.60.13, with a limited feature set below the
# toolkit's own driver (no PTX JIT of newer PTX); 13.x needs >= 580.
DRIVER_FLOORS: dict[int, tuple[int, ...]] = {
    11: (450, 80, 2),
    12: (525, 60, 13),
    13: (580,),
}
PROC_VERSION = Path("/proc/driver/nvidia/version")
DOCS = 'docs/deployment.md, "GPU images and CUDA drivers"'
# Printed by vLLM's Python: its torch's version, CUDA build and whether CUDA is usable.
_PROBE = (
    "import json, torch; print(json.dumps([torch.__version__, torch.version.cuda, "
    "torch.cuda.is_available()]))"
)


@dataclass(frozen=True)
class TorchCuda:
    """What a torch says of CUDA: its version, the CUDA it was built for (None: a CPU
    build) and whether `torch.cuda.is_available()`."""

    version: str
    cuda: str | None
    available: bool


def parse_version(text: str) -> tuple[int, ...] | None:
    """`575.57.08` -> (575, 57, 8); None when `text` holds no dotted number."""
    match = re.search(r"\d+(?:\.\d+)*", text)
    return tuple(int(part) for part in match.group(0).split(".")) if match else None


def show(version: tuple[int, ...]) -> str:
    """(525, 60, 13) -> `525.60.13` (two digits after the first, as NVIDIA writes them)."""
    return ".".join([str(version[0]), *(f"{part:02d}" for part in version[1:])])


def driver_from_proc(text: str) -> str | None:
    """The driver version in /proc/driver/nvidia/version's `NVRM version:` line (the
    proprietary and the open kernel module write it differently)."""
    match = re.search(r"NVRM version:.*?Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", text + " ")
    return match.group(1) if match else None


def read_driver_version(proc: Path = PROC_VERSION) -> str | None:
    """The host's NVIDIA driver as this container sees it: the kernel module's version
    file, else `nvidia-smi`; None when neither is there (no GPU passed in)."""
    try:
        found = driver_from_proc(proc.read_text(errors="replace"))
    except OSError:
        found = None
    if found or shutil.which("nvidia-smi") is None:
        return found
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def driver_floor(cuda: str) -> tuple[int, ...] | None:
    """The minimum driver for a CUDA runtime version (`13.0`, `12.8`); None if unknown."""
    version = parse_version(cuda)
    return DRIVER_FLOORS.get(version[0]) if version else None


def floor_line(what: str, torch: TorchCuda, driver: str | None) -> str:
    """The start-up line: which CUDA `what` was built for, the driver it needs, the host's."""
    if torch.cuda is None:
        return f"{what}: torch {torch.version} is a CPU build (no CUDA)"
    floor = driver_floor(torch.cuda)
    needs = f"NVIDIA driver >= {show(floor)}" if floor else "an unknown driver floor"
    host = driver or "none found"
    return f"{what}: torch {torch.version}, CUDA {torch.cuda}: needs {needs}; host driver: {host}"


def cuda_problem(what: str, torch: TorchCuda, driver: str | None) -> str | None:
    """None when CUDA is usable; else the start-up error, naming the driver and the wheel's
    CUDA version and what to do."""
    if torch.available:
        return None
    if torch.cuda is None:
        return (
            f"CUDA was requested but {what}'s torch {torch.version} is a CPU build: use the "
            f"GPU image (Dockerfile.gpu) or a CPU device ({DOCS})"
        )
    floor = driver_floor(torch.cuda)
    wheel = f"{what}'s torch {torch.version} is built for CUDA {torch.cuda}"
    if driver is None:
        return (
            f"CUDA was requested but no NVIDIA driver is visible (no {PROC_VERSION}, no "
            f"nvidia-smi); {wheel}. Give the container the GPU (compose's device reservation "
            f"or --gpus, with the NVIDIA container toolkit) ({DOCS})"
        )
    have = parse_version(driver)
    if floor is not None and have is not None and have < floor:
        return (
            f"CUDA is not usable: the host's NVIDIA driver {driver} is older than "
            f"{show(floor)}, the minimum for CUDA {torch.cuda}; {wheel}. Upgrade the driver, "
            f"or build the image for the driver's CUDA (build args CUDA_FLAVOUR and "
            f"TORCH_INDEX_URL) ({DOCS})"
        )
    return (
        f"CUDA is not usable although the NVIDIA driver {driver} meets the floor for CUDA "
        f"{torch.cuda} ({wheel}): check that the container sees a GPU (nvidia-smi, "
        f"CUDA_VISIBLE_DEVICES) ({DOCS})"
    )


def probe_torch(python: str, timeout_s: float = 300.0) -> TorchCuda:
    """Ask another Python (vLLM's environment) what its torch says of CUDA; RuntimeError
    naming that Python when it cannot answer."""
    try:
        done = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"cannot ask {python} about its torch: {exc}") from exc
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{python} cannot import torch: {tail[0]}")
    version, cuda, available = json.loads(lines[-1])
    return TorchCuda(str(version), cuda if cuda is None else str(cuda), bool(available))
