"""Fail an image build whose torch is not the CUDA flavour it asked for.

    python3 deploy/cuda_flavour.py cu130

An index that serves another flavour than `CUDA_FLAVOUR` (or PyPI's CUDA 13 build where a
CUDA 12 one was meant) gives an image that needs another driver: the GPU Dockerfiles run
this right after installing torch. Exit 0 and one line when torch's `torch.version.cuda`
is the flavour; exit 1 naming both otherwise.
"""

from __future__ import annotations

import sys


def flavour(cuda: str | None) -> str:
    """torch's `torch.version.cuda` as a flavour name: `13.0` -> `cu130`; a CPU build `cunone`."""
    return "cu" + (cuda or "none").replace(".", "")


def main(argv: list[str]) -> int:
    import torch  # the image's, after the install this checks

    want, got = argv[1], flavour(torch.version.cuda)
    if got != want:
        print(
            f"torch {torch.__version__} is {got}, not CUDA_FLAVOUR={want}: check TORCH_INDEX_URL",
            file=sys.stderr,
        )
        return 1
    print(f"torch {torch.__version__}: {got}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
