"""ART's data types without torch: `from artfleet.contracts.art_types import art`.

The codec, the rollout workers and the reward service need only ART's types
(`Trajectory`, `TrajectoryGroup`, `History`, ...) and RULER, none of which uses torch.
But `import art` imports transformers whenever it is importable (to patch it), and
transformers imports torch: in a development environment that has both, every service
would load libtorch just to encode a trajectory. So ART is imported here with
transformers hidden, unless transformers is already imported (then hiding it is moot:
a trainer process; `artfleet_trainer.backends.art_compat` undoes ART's patch there).

The slim service images do not install torch or transformers at all; this module keeps
development environments (where everything is installed) honest about the same thing.

Also, before ART comes in:
- litellm (imported by ART) downloads a model price list at import unless told to use
  its local copy: no network here, and a slow import everywhere else.
- weave (imported by ART) stays off; W&B too unless `WANDB_API_KEY` is set.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # weights ship with packages; never download
if not os.environ.get("WANDB_API_KEY"):
    # W&B is optional: ART logs to it when a key is set (artfleet_trainer.jobs.wandb_runs).
    # An empty key (compose passes `${WANDB_API_KEY:-}`) is no key: ART tests presence
    # only, and would call W&B's disabled no-op run, which breaks its `model.log`.
    os.environ.pop("WANDB_API_KEY", None)
    os.environ.setdefault("WANDB_MODE", "disabled")

_HIDE = "transformers" not in sys.modules
if _HIDE:
    # `import transformers` inside ART now raises ImportError, which ART tolerates.
    sys.modules["transformers"] = None  # type: ignore[assignment]
try:
    import art
    import art.dev
    import art.rewards  # RULER, for the reward service
    import art.trajectories
    import art.types

    # `art.rewards.ruler` is the function (the package re-exports it over its module name).
    from art.rewards.ruler import DEFAULT_RUBRIC as RULER_DEFAULT_RUBRIC
finally:
    if _HIDE and sys.modules.get("transformers", 0) is None:
        del sys.modules["transformers"]

__all__ = ["RULER_DEFAULT_RUBRIC", "art"]
