import numpy as np
import pytest

from orchestrator.training.advantages import group_advantages


def test_normalised_within_each_group_id_not_by_position():
    # Two groups with the same prompt text interleaved in the batch: identity is the group id.
    group_ids = np.array([7, 9, 7, 9, 7, 9])
    rewards = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    advantages = group_advantages(rewards, group_ids)
    for group in (7, 9):
        members = group_ids == group
        assert abs(advantages[members].sum()) < 1e-9
    assert advantages[0] > 0 > advantages[2]
    assert advantages[5] > 0 > advantages[1]


def test_equal_rewards_give_zero_advantage_and_scaling_options():
    group_ids = np.array([0, 0, 1, 1])
    rewards = np.array([0.5, 0.5, 0.0, 2.0])
    assert np.allclose(group_advantages(rewards, group_ids)[:2], 0.0)
    assert np.allclose(group_advantages(rewards, group_ids, "none"), [0, 0, -1, 1])
    with pytest.raises(ValueError, match="group 3 has 1 sample"):
        group_advantages(np.array([1.0, 0.0, 1.0]), np.array([2, 2, 3]))


def test_a_split_sessions_segments_share_its_advantage_and_count_once():
    """Group 0: sessions scoring 1, 0, 0, the first split in three segments (rows 0-2). Its advantages are
    those of the three sessions alone, and every segment gets the session's."""
    rewards = np.array([1.0, 1.0, 1.0, 0.0, 0.0])
    counted = np.array([True, False, False, True, True])
    split = group_advantages(rewards, np.zeros(5, dtype=int), counted=counted)
    alone = group_advantages(np.array([1.0, 0.0, 0.0]), np.zeros(3, dtype=int))
    np.testing.assert_allclose(split, alone[[0, 0, 0, 1, 2]])
    assert not np.allclose(group_advantages(rewards, np.zeros(5, dtype=int)), split)  # counting rows would differ
    with pytest.raises(ValueError, match="group 0 has 1 sample"):
        group_advantages(np.array([1.0, 1.0]), np.zeros(2, dtype=int), counted=np.array([True, False]))
