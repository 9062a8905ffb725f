"""Which base models this trainer can load, checked at submit (no torch here): the embedded
default by one of its names, or a Hugging Face model folder on the trainer's machine.
Hub ids are mapped onto such folders by `ARTFLEET_BASE_MODEL_MAP`; nothing is downloaded.
The torch loader (`torch_backend.model_loader`) loads exactly what passes here."""

from __future__ import annotations

import json
from pathlib import Path

from artfleet.contracts.errors import InvalidArgument

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
MODEL_ALIASES = frozenset({DEFAULT_MODEL_NAME, "HuggingFaceTB/SmolLM2-135M-Instruct"})
MAP_SETTING = "ARTFLEET_BASE_MODEL_MAP"
EXAMPLE_HUB_ID = "Qwen/Qwen2.5-7B-Instruct"
# A model folder holds its config; a folder without one fails deep inside transformers.
MODEL_CONFIG = "config.json"
# Where the torch loader keeps the embedded default's safetensors copy when no cache dir is
# set (named here, torch-free, for what reads its config at submit).
DEFAULT_CACHE_DIR = Path("~/.cache/artfleet/models") / DEFAULT_MODEL_NAME


def is_embedded_default(base_model: str) -> bool:
    return base_model in MODEL_ALIASES


def model_folder(base_model: str) -> Path | None:
    """The local model folder `base_model` names, or None."""
    folder = Path(base_model).expanduser()
    return folder if (folder / MODEL_CONFIG).is_file() else None


def resolve(base_model: str, base_model_map: dict[str, str]) -> str:
    """What a job's `base_model` loads here: its mapped name or path, else itself."""
    return base_model_map.get(base_model, base_model)


def known_base_models(art_path: str, base_model_map: dict[str, str]) -> list[str]:
    """Names this trainer loads: the embedded default's, the map's keys whose folder is
    there, and the folders earlier jobs trained from (ART's `model.json` of each model)."""
    known = set(MODEL_ALIASES)
    known.update(k for k, v in base_model_map.items() if _loadable(v))
    for config in Path(art_path).glob("*/models/*/model.json"):
        try:
            base = str(json.loads(config.read_text()).get("base_model") or "")
        except (OSError, ValueError, AttributeError):
            continue  # a model being written or foreign: not ours to judge
        if base and _loadable(base):
            known.add(base)
    return sorted(known)


def _loadable(base_model: str) -> bool:
    return is_embedded_default(base_model) or model_folder(base_model) is not None


def check_base_model(base_model: str, art_path: str, base_model_map: dict[str, str]) -> None:
    """Raises InvalidArgument naming `base_model` unless the torch backend can load it."""
    if _loadable(base_model):
        return
    folder = Path(base_model).expanduser()
    if folder.is_dir():
        why = f"{base_model!r} is a folder without {MODEL_CONFIG} on the trainer"
    else:
        why = f"unknown base model {base_model!r}"
    example = json.dumps({EXAMPLE_HUB_ID: "/models/qwen2.5-7b-instruct"})
    raise InvalidArgument(
        f"{why}; this trainer loads {', '.join(known_base_models(art_path, base_model_map))}"
        f" or a Hugging Face model folder ({MODEL_CONFIG} and weights) on its machine, and "
        f"downloads nothing. To train a hub id, put its files in a folder the trainer reads "
        f"and name the folder, or map the id in the trainer's environment: "
        f"{MAP_SETTING}='{example}' (JSON: name -> folder)",
        "base_model",
    )
