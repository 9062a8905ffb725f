"""What the trainer computes in: the base model's dtype, and what stays fp32.

- The base weights, the decoder's activations and the KV cache of the built-in server are
  in the trainer's dtype: bf16 on CUDA (`auto`), fp32 on a CPU. An H100 runs fp32 matmuls
  at ~67 TFLOP/s against ~990 in bf16, and a 14B base is 55 GiB in fp32 (27.5 in bf16).
- The LoRA adapter, its gradients and AdamW's state stay fp32 (peft upcasts a bf16 base's
  adapter, `autocast_adapter_dtype`): updates of ~1e-5 vanish in bf16's 8-bit mantissa.
  peft casts each projection's input to fp32 for the adapter, so the LoRA branch runs in
  fp32 too (activation_memory.py counts those copies).
- Logits leave the lm-head product in the model's dtype, as vLLM's do, and are upcast
  before the log-softmax: logprobs, entropies and the loss are fp32.
- Whatever still multiplies in fp32 on CUDA may use TF32 (`high` matmul precision).
fp16 is not offered: it needs loss scaling, and every GPU that serves Qwen3 has bf16.
"""

from __future__ import annotations

import torch

_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp32": torch.float32}


def is_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


def resolve_dtype(name: str, device: str | torch.device) -> torch.dtype:
    """The base model's dtype for `name` on `device`: `auto` is bf16 on a CUDA device
    that supports it, else fp32 (a CPU's bf16 matmuls are no faster, and tests compare
    logprobs at 1e-4)."""
    if name == "auto":
        if is_cuda(device) and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown trainer dtype {name!r} (auto, bf16, fp32)") from None


def configure_device(device: str | torch.device) -> None:
    """Allow TF32 for the fp32 matmuls that remain on CUDA (the LoRA branch, fp32 models);
    no effect on a CPU."""
    if is_cuda(device):
        torch.set_float32_matmul_precision("high")


def release_cached_memory(device: str | torch.device) -> None:
    """Hand the caching allocator's free blocks back to the driver, so that vLLM (which
    asks for its share of the whole GPU when it starts) finds them after a step."""
    if is_cuda(device) and torch.cuda.is_available():
        torch.cuda.empty_cache()


def free_memory_bytes(device: str | torch.device) -> int:
    """Memory free for more tensors: the GPU's (CUDA's own count), else the machine's
    available memory (/proc/meminfo's MemAvailable)."""
    if is_cuda(device):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0
