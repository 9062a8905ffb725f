"""The torch backend's num_trajectories_learning_rate_multiplier_power: a row's learning rate
scales with the trajectories it holds."""

from __future__ import annotations

import pytest
import torch

from artfleet_trainer.torch_backend.training import _rate_multiplier


@pytest.mark.parametrize(("power", "expected"), [(0.0, 1e-3), (1.0, 3e-3), (0.5, 3**0.5 * 1e-3)])
def test_the_learning_rate_scales_with_the_rows_trajectories(power: float, expected: float) -> None:
    # Three trajectories (group ids 1, 2, 3) sharing the prompt of group 0, plus padding.
    inputs = {
        "group_ids": torch.tensor([[0, 0, 1, 2, 3, -1]]),
        "parent_ids": torch.tensor([[0, 0, 0, 0, 0, -1]]),
    }
    assert 1e-3 * _rate_multiplier(inputs, power) == pytest.approx(expected)
