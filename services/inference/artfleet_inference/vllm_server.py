"""vLLM's OpenAI-compatible server as a child process on loopback.

Only this service talks to it: vLLM runs with its development endpoints on (in-place
weight reload, prefix-cache reset) and runtime LoRA loading, which must never face the
network; the front (server.py) is what other services reach, with the fleet's token.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import secrets
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from artfleet.contracts import gpu_plan
from artfleet.contracts.gpu_tenants import LoraServing, lora_serving
from artfleet.runtime.ports import PortHold
from artfleet_inference import cpu_memory, vllm_main, vllm_worker
from artfleet_inference.engine import MAX_REGISTERED_ADAPTERS
from artfleet_inference.process_group import spawn_group, stop_group
from artfleet_inference.settings import InferenceSettings
from artfleet_inference.vllm_exit import ChildEnd, LogTail, VllmEnd, first_child_end

log = logging.getLogger(__name__)
WORKER_EXTENSION = f"{vllm_worker.__name__}.{vllm_worker.PolicyWeights.__name__}"


@dataclass(frozen=True)
class VllmLaunch:
    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class LaunchMemory:
    """vLLM's dtype, context and GPU share, with every `auto` resolved."""

    dtype: str
    max_model_len: int
    gpu_memory_utilization: float | None  # None on a CPU (kv_cache_bytes instead)
    plan: gpu_plan.GpuPlan | None = None  # the GPU plan an `auto` came from
    kv_cache_bytes: int | None = None  # on a CPU: vLLM's --kv-cache-memory-bytes


def vllm_dtype(settings: InferenceSettings) -> str:
    if settings.inference_dtype:
        return settings.inference_dtype
    return "auto" if settings.inference_device == "cuda" else "float32"


def uses_model_config(settings: InferenceSettings) -> bool:
    """Whether the launch needs the model's config.json: on a CPU always (the memory check
    counts its weights), on CUDA for an `auto` (with the GPU's memory)."""
    gpu_auto = settings.inference_gpu_memory_utilization == "auto"
    cuda = settings.inference_device == "cuda"
    return settings.inference_max_model_len == "auto" or not cuda or gpu_auto


def launch_memory(
    settings: InferenceSettings,
    config: Mapping[str, Any] | None = None,
    gpu_total_bytes: int | None = None,
    machine: cpu_memory.MachineMemory | None = None,
) -> LaunchMemory:
    """Resolve `auto` (pure: unit-tested). On a CPU, the KV cache fits `machine`'s memory
    (cpu_memory.kv_cache_bytes) and max_model_len is the longest whose KV_SEQUENCES fit it;
    on CUDA both come from `gpu_plan.plan_gpu`, which also takes a number given for either
    one as fixed."""
    dtype, length = vllm_dtype(settings), settings.inference_max_model_len
    share = settings.inference_gpu_memory_utilization
    if settings.inference_device == "cpu":
        return _cpu_launch_memory(settings, dtype, config, machine)
    if not uses_model_config(settings):
        assert length != "auto"
        return LaunchMemory(dtype, length, None if share == "auto" else share)
    if config is None:
        raise ValueError("max_model_len or gpu_memory_utilization auto needs the config.json")
    value_bytes = gpu_plan.dtype_bytes(dtype, gpu_plan.ModelShape.from_config(config).weight_bytes)
    if gpu_total_bytes is None:
        raise ValueError("auto on CUDA needs the GPU's total memory")
    lora = lora_flags(settings)
    plan = gpu_plan.plan_gpu(
        config,
        gpu_total_bytes,
        weight_bytes=value_bytes,
        max_loras=lora.max_loras,
        max_lora_rank=lora.max_lora_rank,
        limits=vllm_limits(settings, gpu_total_bytes),
        max_model_len=None if length == "auto" else length,
        gpu_memory_utilization=None if share == "auto" else share,
    )
    return LaunchMemory(dtype, plan.max_model_len, plan.gpu_memory_utilization, plan)


def _cpu_launch_memory(
    settings: InferenceSettings,
    dtype: str,
    config: Mapping[str, Any] | None,
    machine: cpu_memory.MachineMemory | None,
) -> LaunchMemory:
    setting, length = settings.inference_kv_cache_gib, settings.inference_max_model_len
    if config is None or machine is None:
        if setting == "auto" or length == "auto":
            raise ValueError("auto on a CPU needs the config.json and the machine's memory")
        return LaunchMemory(dtype, length, None, kv_cache_bytes=int(setting * gpu_plan.GiB))
    shape = gpu_plan.ModelShape.from_config(config)
    value_bytes = gpu_plan.dtype_bytes(dtype, shape.weight_bytes)
    # An `auto` length is fitted to the KV cache after: the cache must hold the shortest.
    checked = gpu_plan.candidate_lengths(shape.max_positions)[-1] if length == "auto" else length
    need = cpu_memory.KvNeed(
        weight_bytes=shape.params() * value_bytes,
        sequence_bytes=checked * shape.kv_bytes_per_token(value_bytes),
        max_model_len=checked,
    )
    kv_cache = cpu_memory.kv_cache_bytes(setting, need, machine)
    if length == "auto":
        length = gpu_plan.fit_max_model_len(config, kv_cache, value_bytes)
    return LaunchMemory(dtype, length, None, kv_cache_bytes=kv_cache)


def lora_flags(settings: InferenceSettings) -> LoraServing:
    """vLLM's LoRA flags: sized for `inference_tenants` (gpu_tenants.lora_serving), else the
    settings as given with the CPU cache holding what the engine keeps registered."""
    if settings.inference_tenants:
        serving = lora_serving(settings.inference_tenants, settings.inference_max_lora_rank)
    else:
        max_loras = settings.inference_max_loras
        serving = LoraServing(max_loras, max_loras, settings.inference_max_lora_rank)
    # vLLM's CPU cache of adapters defaults to max_loras: the engine keeps more
    # registered, and each one evicted would be read from disk again when used.
    cpu_loras = max(MAX_REGISTERED_ADAPTERS, serving.max_cpu_loras)
    return dataclasses.replace(serving, max_cpu_loras=cpu_loras)


def vllm_limits(settings: InferenceSettings, gpu_total_bytes: int) -> gpu_plan.VllmLimits:
    """vLLM's defaults, or what the extra flags set (they size vLLM's profile run)."""
    limits = gpu_plan.VllmLimits.defaults_for(gpu_total_bytes)
    extra = shlex.split(settings.inference_extra_args)
    seqs = _flag_value(extra, "--max-num-seqs")
    tokens = _flag_value(extra, "--max-num-batched-tokens")
    return gpu_plan.VllmLimits(
        int(seqs) if seqs else limits.max_num_seqs,
        int(tokens) if tokens else limits.max_num_batched_tokens,
    )


def _flag_value(argv: list[str], name: str) -> str | None:
    """The last value of `name` (`--x v` or `--x=v`), as argparse reads it."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(f"{name}="):
            value = arg.partition("=")[2]
    return value


def vllm_launch(
    settings: InferenceSettings,
    model_dir: Path,
    served_name: str,
    port: int,
    key: str,
    memory: LaunchMemory | None = None,
) -> VllmLaunch:
    """The command and environment that start vLLM for `settings` (pure: unit-tested);
    `memory` resolves any `auto` (`launch_memory`)."""
    memory = memory or launch_memory(settings)
    lora = lora_flags(settings)
    argv = [
        settings.inference_vllm_python,
        "-m",
        vllm_main.__name__,  # vLLM's API server, its processes dying with this one
        "--model",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        # One token: a random key may begin with "-", which argparse would take for a flag.
        f"--api-key={key}",
        "--dtype",
        memory.dtype,
        "--max-model-len",
        str(memory.max_model_len),
        "--enable-lora",
        "--max-lora-rank",
        str(lora.max_lora_rank),
        "--max-loras",
        str(lora.max_loras),
        "--max-cpu-loras",
        str(lora.max_cpu_loras),
        # Logprob entries name ids (`token_id:<id>`), as ART's tokenization reads them.
        "--return-tokens-as-token-ids",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        settings.inference_tool_call_parser,
        "--enable-prefix-caching"
        if settings.inference_prefix_caching
        else "--no-enable-prefix-caching",
        "--disable-uvicorn-access-log",
        # artfleet_load_policy for /collective_rpc: merged weights loaded from memory.
        "--worker-extension-cls",
        WORKER_EXTENSION,
    ]
    if settings.inference_reasoning_parser:
        argv += ["--reasoning-parser", settings.inference_reasoning_parser]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARTFLEET_")}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # whole GiB only; it would override the flag
    env.update(
        VLLM_SERVER_DEV_MODE="1",  # /collective_rpc reload_weights, /reset_prefix_cache
        VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
        HF_HUB_OFFLINE="1",
    )
    env[vllm_main.PARENT_ENV] = str(os.getpid())
    source = package_source_dir()
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH", "")]))
    if memory.kv_cache_bytes is not None:
        argv += ["--kv-cache-memory-bytes", str(memory.kv_cache_bytes)]
    elif memory.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", f"{memory.gpu_memory_utilization:g}"]
    argv += shlex.split(settings.inference_extra_args)
    return VllmLaunch(argv, env)


def package_source_dir() -> str | None:
    """The folder vLLM's Python must import `artfleet_inference.vllm_worker` from, when this
    package is a source checkout (vLLM lives in an environment of its own there); None
    when it is installed in site-packages (the images: vLLM's environment is ours), which
    must not go before the standard library on vLLM's path."""
    parent = Path(vllm_worker.__file__).resolve().parent.parent
    return None if parent.name in ("site-packages", "dist-packages") else str(parent)


def resolve_launch_memory(settings: InferenceSettings, model_dir: Path) -> LaunchMemory:
    """`launch_memory` with what an `auto` reads from this machine: the served model's
    config.json and the GPU's total memory; the plan is logged."""
    if not uses_model_config(settings):
        return launch_memory(settings)
    config = gpu_plan.read_config(model_dir)
    if settings.inference_device == "cpu":
        machine = cpu_memory.machine_memory()
        memory = launch_memory(settings, config, machine=machine)
        assert memory.kv_cache_bytes is not None
        log.info(
            "vLLM's KV cache %.2f GiB (%s=%s; %s %.2f GiB), max_model_len %d",
            memory.kv_cache_bytes / gpu_plan.GiB,
            cpu_memory.SETTING,
            settings.inference_kv_cache_gib,
            machine.source,
            machine.available / gpu_plan.GiB,
            memory.max_model_len,
        )
        return memory
    memory = launch_memory(settings, config, gpu_total_bytes(settings))
    assert memory.plan is not None  # an `auto` was resolved
    level = logging.INFO if memory.plan.fits else logging.WARNING
    log.log(level, "GPU plan for %s: %s", model_dir, memory.plan.summary())
    return memory


def gpu_total_bytes(settings: InferenceSettings) -> int:
    """The GPU's total memory: the setting, else nvidia-smi's, else torch's in vLLM's own
    Python (this service's Python has no torch)."""
    if settings.inference_gpu_memory_mib:
        return settings.inference_gpu_memory_mib * gpu_plan.MiB
    found = _nvidia_smi_total_bytes()
    if found is None:
        found = _torch_total_bytes(settings.inference_vllm_python)
    if found is None:
        raise RuntimeError(
            "auto needs the GPU's memory: neither nvidia-smi nor torch in "
            f"{settings.inference_vllm_python} told it; set ARTFLEET_INFERENCE_GPU_MEMORY_MIB"
        )
    return found


def _nvidia_smi_total_bytes() -> int | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    argv = [smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible:
        argv += ["-i", visible]  # the GPU vLLM will use: the first it sees
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
        return int(out.stdout.split()[0]) * gpu_plan.MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        log.warning("nvidia-smi did not tell the GPU's memory: %s", exc)
        return None


def _torch_total_bytes(python: str) -> int | None:
    code = "import torch; print(torch.cuda.mem_get_info()[1])"
    try:
        out = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=180, check=True
        )
        return int(out.stdout.split()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        log.warning("torch in %s did not tell the GPU's memory: %s", python, exc)
        return None


def why(log_text: str, most: int = 12) -> str:
    """The root cause from vLLM's log: its error lines, the first and the last of them when
    there are many (a worker's traceback ends far above the engine's generic
    "initialization failed"), then the log's last lines; a KV cache vLLM found too large
    is named by our setting (vLLM names its own)."""
    lines = log_text.splitlines()
    errors = [line for line in lines if " ERROR " in line or "Error:" in line]
    # A traceback's first lines say where, its last ones what.
    picked = errors if len(errors) <= most else [*errors[:4], "...", *errors[-(most - 4) :]]
    if "less than requested memory for kv" in log_text:
        picked.append(f"(vLLM's KV cache is {cpu_memory.SETTING}: lower it or free memory)")
    return "\n".join([*picked, "...", *lines[-8:]])


class VllmServer:
    """`start()` spawns vLLM (its own process group, dying with this process) and waits
    until `/health` answers; `ended()` waits until vLLM dies and tells how; `stop(grace)`
    ends the whole group (SIGTERM, SIGKILL past the grace)."""

    def __init__(
        self, settings: InferenceSettings, model_dir: Path, served_name: str, log_path: Path
    ) -> None:
        self._held = PortHold()  # until vLLM listens there: its start takes minutes
        self.port = self._held.pick()
        self.key = secrets.token_urlsafe(24)  # vLLM's own key: only the front knows it
        self._settings = settings
        self._model_dir = model_dir
        self._served_name = served_name
        self._launch: VllmLaunch | None = None  # at start: an `auto` may ask the GPU
        self._timeout_s = settings.inference_start_timeout_s
        self._log_path = log_path
        self._log: LogTail | None = None  # this start's part of the log
        self._child: ChildEnd | None = None  # the first vLLM child found dead
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The API server's pid: also its process group's id."""
        return None if self._proc is None else self._proc.pid

    def end(self) -> VllmEnd | None:
        """How vLLM ended, once its API server exited or a child of it died; else None."""
        if self._proc is None or self._log is None:
            return None
        code = self._proc.poll()
        # The child's line comes first: the API server exits after it has logged it.
        self._child = self._child or first_child_end(self._log.read())
        if code is None and self._child is None:
            return None
        return VllmEnd(self._proc.pid, code, self._child)

    async def start(self) -> None:
        memory = await asyncio.to_thread(resolve_launch_memory, self._settings, self._model_dir)
        self._launch = vllm_launch(
            self._settings, self._model_dir, self._served_name, self.port, self.key, memory
        )
        self._held.hold(self.port)  # again, after a stop
        self._spawn()  # in the main thread: PR_SET_PDEATHSIG follows the forking thread
        await self._wait_ready()

    def _spawn(self) -> None:
        assert self._launch is not None
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = LogTail(self._log_path)
        with open(self._log_path, "ab") as out:
            self._proc = spawn_group(self._launch.argv, self._launch.env, out)
        log.info("vLLM starting (pid %d, log %s)", self._proc.pid, self._log_path)

    async def ended(self, poll_s: float = 0.5) -> VllmEnd:
        """Until vLLM dies (its API server exits, or its log tells a child died)."""
        while (end := self.end()) is None:  # noqa: ASYNC110  # the log has no event to await
            await asyncio.sleep(poll_s)
        return end

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                end = self.end()
                if end is not None:
                    assert self._log is not None
                    raise RuntimeError(f"{end.describe()}:\n{why(self._log.text)}")
                try:
                    async with session.get(f"{self.base_url}/health") as reply:
                        if reply.status == 200:
                            log.info("vLLM ready on 127.0.0.1:%d", self.port)
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"vLLM not ready after {self._timeout_s:.0f}s")
                await asyncio.sleep(0.5)

    async def stop(self, grace_s: float) -> None:
        """Ends vLLM's whole process group, also when its API server has exited already
        (its engine processes may outlive it)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            await stop_group(proc, grace_s)
        self._held.release()
