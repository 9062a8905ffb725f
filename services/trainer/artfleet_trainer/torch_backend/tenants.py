"""Many tenants, one base: every trainable model of a backend is a LoRA adapter on the one
frozen copy of its base model.

A backend loads each base model (by name; its dtype and device are the backend's) once,
wraps it in one peft model and gives every tenant (a job's model, a Tinker training
client) its own named adapter on it, with its own rank and alpha. A tenant's
`TenantModel` is what the training and serving code holds as "the model": calling it
runs the shared network with that tenant's adapter active, and its parameters, state
and saved checkpoints are that adapter's alone, so a tenant's forward and backward
touch only its own LoRA and its optimizer holds only its own tensors.

peft switches adapters with `set_adapter`, which also marks only the active adapter's
tensors as requiring gradients; all model work runs on the backend's one torch thread
(and a step holds the backend's gate), so the switch is never raced. Switching costs a
walk over the LoRA layers (about a millisecond on SmolLM2-135M) and happens only when
another tenant's work comes next.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict

from .model_loader import LoadedModel


@dataclass(eq=False)
class SharedBase:
    """One base model in memory and the tenants' adapters on it."""

    name: str
    loaded: LoadedModel
    peft_model: Any = None  # the peft wrapper, made by the first tenant
    tenants: dict[str, TenantModel] = field(default_factory=dict)

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    def adapter_name(self, model_name: str) -> str:
        """A peft adapter name for the model (a module key: no dots), unique here."""
        # prefixed: a bare "model" would match the wrapper's own module path
        stem = "t_" + re.sub(r"\W", "_", model_name)
        name, n = stem, 1
        while self.peft_model is not None and name in self.peft_model.peft_config:
            n += 1
            name = f"{stem}_{n}"
        return name

    def add(
        self, model_name: str, config: LoraConfig, checkpoint: Path | None, seed: int | None = None
    ) -> TenantModel:
        """A new tenant: a fresh adapter of `config` (its random init drawn from `seed`
        when given: `seeded`), or the one saved at `checkpoint`."""
        adapter = self.adapter_name(model_name)
        if self.peft_model is None:
            if checkpoint is not None:
                self.peft_model = PeftModel.from_pretrained(
                    self.loaded.model, str(checkpoint), adapter_name=adapter, is_trainable=True
                )
            else:
                with seeded(seed):
                    self.peft_model = get_peft_model(
                        self.loaded.model, config, adapter_name=adapter
                    )
        elif checkpoint is not None:
            self.peft_model.load_adapter(str(checkpoint), adapter_name=adapter, is_trainable=True)
        else:
            with seeded(seed):
                self.peft_model.add_adapter(adapter, config)
        self.peft_model.eval()
        tenant = TenantModel(self, adapter)
        self.tenants[model_name] = tenant
        tenant.activate(force=True)
        return tenant

    def remove(self, model_name: str) -> bool:
        """Drop the tenant's adapter; True when it was the last (the base may go too)."""
        tenant = self.tenants.pop(model_name, None)
        if tenant is not None and self.tenants:
            self.peft_model.delete_adapter(tenant.adapter)
            next(iter(self.tenants.values())).activate(force=True)
        return not self.tenants


def peft_args(model: Any) -> dict[str, Any]:
    """ART's `_internal_config.peft_args` of a model ({} when it sets none)."""
    return dict((getattr(model, "_internal_config", None) or {}).get("peft_args") or {})


def lora_seed(model: Any) -> int | None:
    """The seed of a model's fresh LoRA: ART's `peft_args.random_state` (the LoRA init
    seed ART's own backend hands unsloth; a job's seed goes there), else None (torch's
    generators as they stand)."""
    seed = peft_args(model).get("random_state")
    return None if seed is None else int(seed)


@contextlib.contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """torch's generators drawn from `seed` inside (peft draws lora_A's init from them),
    as they were after; None: left as they are. Around the adapter's creation alone, so
    its init is the seed's whether or not the base was loaded (or another tenant made)
    first: one seed, one starting adapter, whichever tenant it is."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        yield


class TenantModel:
    """One tenant's view of the shared peft model: its adapter, active whenever it runs."""

    def __init__(self, base: SharedBase, adapter: str) -> None:
        self._base = base
        self.adapter = adapter

    def activate(self, *, force: bool = False) -> None:
        """Torch thread: this tenant's adapter answers (and alone requires gradients)."""
        peft_model = self._base.peft_model
        if force or peft_model.active_adapter != self.adapter:
            peft_model.set_adapter(self.adapter)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.activate()
        return self._base.peft_model(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # before __init__ (copy, pickle): no recursion
            raise AttributeError(name)
        # config, get_base_model, generation_config, train/eval ...: the shared model's
        return getattr(self._base.peft_model, name)

    def named_parameters(self, *_: Any, **__: Any) -> Iterator[tuple[str, torch.nn.Parameter]]:
        """This tenant's adapter tensors (whether or not another tenant is active now)."""
        marker = f".{self.adapter}."
        for name, param in self._base.peft_model.named_parameters():
            if marker in name:
                yield name, param

    def parameters(self, *_: Any, **__: Any) -> Iterator[torch.nn.Parameter]:
        for _name, param in self.named_parameters():
            yield param

    def state_dict(self, *_: Any, **__: Any) -> dict[str, torch.Tensor]:
        return {name: param for name, param in self.named_parameters()}

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """The adapter as peft saves it (keys without the adapter's name)."""
        return get_peft_model_state_dict(self._base.peft_model, adapter_name=self.adapter)

    def load_adapter_state(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Weights as peft saves them into this tenant's adapter."""
        set_peft_model_state_dict(self._base.peft_model, dict(weights), adapter_name=self.adapter)

    @property
    def peft_config(self) -> dict[str, Any]:
        """This tenant's LoRA config, under peft's default name (as a private model has)."""
        return {"default": self._base.peft_model.peft_config[self.adapter]}

    def save_pretrained(self, directory: str) -> None:
        """The adapter alone, in peft's layout at `directory` (as a private model saves it):
        peft writes a named adapter into a subfolder, which is moved up."""
        scratch = Path(tempfile.mkdtemp(prefix=".adapter-", dir=directory))
        try:
            self._base.peft_model.save_pretrained(str(scratch), selected_adapters=[self.adapter])
            for item in (scratch / self.adapter).iterdir():
                shutil.move(str(item), Path(directory) / item.name)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


BaseLoader = Callable[[str], LoadedModel]


class SharedBases:
    """A backend's base models, one per name, each kept while it has a tenant."""

    def __init__(self, loader: BaseLoader) -> None:
        self._loader = loader
        self._bases: dict[str, SharedBase] = {}
        self.loads = 0  # bases loaded (benchmarks: once per base, however many tenants)

    def tenant(
        self,
        model_name: str,
        base_model: str,
        config: LoraConfig,
        checkpoint: Path | None,
        seed: int | None = None,
    ) -> tuple[TenantModel, SharedBase, float]:
        """Torch thread: the tenant `model_name` on `base_model` (loaded if no tenant has
        it; a fresh adapter's init drawn from `seed`); the seconds loading took (0 when it
        was in memory)."""
        base = self._bases.get(base_model)
        seconds = 0.0
        if base is None:
            loaded = self._loader(base_model)
            self.loads += 1
            seconds = loaded.load_seconds
            base = self._bases[base_model] = SharedBase(base_model, loaded)
        if model_name in base.tenants:
            raise ValueError(f"a model named {model_name!r} is already a tenant")
        return base.add(model_name, config, checkpoint, seed), base, seconds

    def release(self, model_name: str, base_model: str) -> None:
        """Torch thread: the tenant leaves; its base goes with the last one."""
        base = self._bases.get(base_model)
        if base is not None and base.remove(model_name):
            del self._bases[base_model]

    def any_config(self) -> Any:
        """A loaded base's config (the shape tenants are sized by)."""
        return next(iter(self._bases.values())).loaded.model.config

    def models(self) -> list[Any]:
        """The loaded base models (benchmarks read their parameters' bytes)."""
        return [base.loaded.model for base in self._bases.values()]

    def tenants_of(self, base_model: str) -> list[str]:
        base = self._bases.get(base_model)
        return list(base.tenants) if base is not None else []

    def __len__(self) -> int:
        return len(self._bases)
