"""Routing a requested name to the weights that answer it (artfleet_inference.policies)."""

from __future__ import annotations

from pathlib import Path

import pytest

from artfleet.contracts.checkpoint_layout import (
    BEST,
    ModelRefError,
    StepRef,
    find_checkpoint,
    write_best,
)
from artfleet_inference.policies import PolicyTable, PublishRefused, UnknownPolicy

CKPT = Path("/art/p/models/pol/checkpoints")


FT = Path("/art/p/models/ft/checkpoints")  # models named ft*: full fine-tunes


def _table(
    mode: str = "merged",
    on_disk: dict[tuple[str, StepRef], int] | None = None,
    root: Path = CKPT,
):
    disk = on_disk or {}

    def find(name: str, step: StepRef) -> tuple[int, Path] | None:
        found = disk.get((name, step))
        return None if found is None else (found, root / f"{found:04d}")

    return PolicyTable(
        "base-model",
        mode,  # type: ignore[arg-type]
        find,
        base_aliases=frozenset({"Org/Base"}),
        is_full=lambda checkpoint: checkpoint.parts[-3].startswith("ft"),
    )


def test_base_is_vllms_own_weights_until_a_policy_is_merged() -> None:
    table = _table()
    assert table.route("base-model").vllm_model == "base-model"
    assert table.route("Org/Base").public == "base-model"
    assert not table.route("base-model").needs_adapter


def test_merged_policy_is_the_base_weights_and_others_are_differences() -> None:
    table = _table(on_disk={("pol", 1): 1})
    assert table.publish("pol", 2, CKPT / "0002") is True  # merged mode: reload
    table.set_merged("pol", 2, CKPT / "0002")
    latest = table.route("pol@2")
    assert (latest.vllm_model, latest.public, latest.needs_adapter) == (
        "base-model",
        "pol@2",
        False,
    )
    assert table.route("pol").public == "pol@2"
    older = table.route("pol@1")
    assert older.needs_adapter and older.adapter == CKPT / "0001"
    assert older.against == CKPT / "0002" and older.vllm_model == "pol@1~m1"
    base = table.route("base-model")
    assert base.needs_adapter and base.adapter is None and base.against == CKPT / "0002"
    # A new merge: difference adapters of the old weights get new names.
    table.publish("pol", 3, CKPT / "0003")
    table.set_merged("pol", 3, CKPT / "0003")
    assert table.route("pol@1").vllm_model == "pol@1~m2"


def test_two_models_training_at_once_do_not_take_the_merge_from_each_other() -> None:
    table = _table()
    a, b = Path("/art/p/models/a/checkpoints"), Path("/art/p/models/b/checkpoints")
    assert table.publish("a", 1, a / "0001") is True
    table.set_merged("a", 1, a / "0001")
    reloads = []
    for step in range(2, 6):  # the two jobs publish in turns: only a's reload the weights
        reloads.append(table.publish("b", step - 1, b / f"{step - 1:04d}"))
        if table.publish("a", step, a / f"{step:04d}"):
            table.set_merged("a", step, a / f"{step:04d}")
            reloads.append(True)
    assert reloads == [False, True] * 4
    served_b = table.route("b")
    assert served_b.public == "b@4" and served_b.against == a / "0005"  # a difference to a's
    # a finished: after HANDOVER_PUBLISHES of b's alone, the merge passes to b.
    handed = [table.publish("b", step, b / f"{step:04d}") for step in range(5, 5 + 4)]
    assert handed == [False, False, False, True]
    table.set_merged("b", 8, b / "0008")
    assert table.publish("b", 9, b / "0009") is True
    assert table.route("a").against == b / "0008"


def test_lora_mode_serves_checkpoints_as_they_are() -> None:
    table = _table("lora")
    assert table.publish("pol", 1, CKPT / "0001") is False  # no reload in lora mode
    route = table.route("pol@1")
    assert (route.vllm_model, route.adapter, route.against) == ("pol@1", CKPT / "0001", None)
    assert table.route("base-model").vllm_model == "base-model"


def test_aliases_route_to_the_step_they_name() -> None:
    table = _table("lora", on_disk={("pol", BEST): 1})
    table.publish("pol", 3, CKPT / "0003")
    best = table.route("pol@best")
    assert (best.public, best.adapter) == ("pol@1", CKPT / "0001")
    assert table.route("pol@latest").public == "pol@3"  # the published one, not the disk
    with pytest.raises(UnknownPolicy, match="marked best"):
        table.route("other@best")
    with pytest.raises(ModelRefError):
        table.route("pol@newest")


def test_unknown_names_and_older_publishes_are_refused() -> None:
    table = _table()
    with pytest.raises(UnknownPolicy):
        table.route("nope@1")
    table.publish("pol", 3, CKPT / "0003")
    with pytest.raises(ValueError, match="older"):
        table.publish("pol", 2, CKPT / "0002")
    table.retire("pol", 3)
    with pytest.raises(UnknownPolicy):
        table.route("pol")


def test_find_checkpoint_reads_only_the_trainers_layout(tmp_path: Path) -> None:
    for step in (0, 2):
        folder = tmp_path / "proj" / "models" / "pol" / "checkpoints" / f"{step:04d}"
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")
    (tmp_path / "proj" / "models" / "pol" / "checkpoints" / "0005").mkdir()  # incomplete
    assert find_checkpoint(tmp_path, "pol", None) == (
        2,
        tmp_path / "proj/models/pol/checkpoints/0002",
    )
    assert find_checkpoint(tmp_path, "pol", 0) is not None
    assert find_checkpoint(tmp_path, "pol", 5) is None
    assert find_checkpoint(tmp_path, "pol", None, accept=lambda model_dir: False) is None
    assert find_checkpoint(tmp_path, "../proj/models/pol", None) is None
    assert find_checkpoint(tmp_path, "*", None) is None
    write_best(tmp_path / "proj" / "models" / "pol", 0, "pass_at_k", 0.5)
    assert find_checkpoint(tmp_path, "pol", BEST) == (
        0,
        tmp_path / "proj/models/pol/checkpoints/0000",
    )


FULL_WHY = (
    "vLLM's weights are the full fine-tune ft@5; one full fine-tune per inference service "
    "serves its latest step only"
)


def _full_owns(mode: str) -> PolicyTable:
    """LoRA policies served (merged mode: one merged), then a full fine-tune published."""
    table = _table(mode, on_disk={("ft", 4): 4, ("ft", BEST): 5}, root=FT)
    table.publish("pol", 2, CKPT / "0002")
    if mode == "merged":
        table.set_merged("pol", 2, CKPT / "0002")
    assert table.publish("ft", 5, FT / "0005") is True  # either mode: a reload
    table.set_merged("ft", 5, FT / "0005")
    return table


@pytest.mark.parametrize("mode", ["merged", "lora"])
def test_a_full_fine_tune_owns_vllms_weights(mode: str) -> None:
    table = _full_owns(mode)
    for requested in ("ft@5", "ft", "ft@latest", "ft@best"):
        route = table.route(requested)
        assert (route.vllm_model, route.public, route.needs_adapter) == (
            "base-model",
            "ft@5",
            False,
        )
    # Nothing else is a LoRA difference to a full model: refused, with the why.
    for requested in ("base-model", "Org/Base", "pol", "pol@2", "ft@4", "nope@1"):
        with pytest.raises(UnknownPolicy, match=FULL_WHY) as refused:
            table.route(requested)
        assert f"model {requested!r} is not served here" in refused.value.message
    assert set(table.latest) == {"ft"}  # the LoRA policies are no longer served


@pytest.mark.parametrize("mode", ["merged", "lora"])
def test_a_lora_publish_is_refused_while_a_full_fine_tune_owns_the_weights(mode: str) -> None:
    table = _full_owns(mode)
    with pytest.raises(PublishRefused, match="pol@3 is a LoRA checkpoint") as refused:
        table.publish("pol", 3, CKPT / "0003")
    assert FULL_WHY in str(refused.value) and "restart the inference service" in str(refused.value)
    assert refused.value.param == "checkpoint"
    assert set(table.latest) == {"ft"}
    assert table.publish("ft", 6, FT / "0006") is True  # its own next step reloads


def test_a_new_full_fine_tune_takes_the_weights_from_the_last() -> None:
    table = _full_owns("lora")
    other = FT.parent.parent / "ft2"
    assert table.publish("ft2", 1, other / "checkpoints" / "0001") is True
    table.set_merged("ft2", 1, other / "checkpoints" / "0001")
    assert table.route("ft2").public == "ft2@1"
    with pytest.raises(UnknownPolicy, match="full fine-tune ft2@1"):
        table.route("ft@5")


@pytest.mark.parametrize("mode", ["merged", "lora"])
def test_a_full_checkpoint_not_in_the_weights_is_not_served(mode: str) -> None:
    """Found on disk by name (a finished full job) while the weights are the base's or a
    LoRA's: a whole model cannot be served as a LoRA."""
    table = _table(mode, on_disk={("ft", None): 5}, root=FT)
    with pytest.raises(UnknownPolicy, match="ft@5 is a full fine-tune's checkpoint"):
        table.route("ft")
    table.publish("pol", 2, CKPT / "0002")
    table.set_merged("pol", 2, CKPT / "0002")
    with pytest.raises(UnknownPolicy, match="served only while it is in vLLM's weights"):
        table.route("ft")
