import numpy as np
import pytest

from orchestrator.learner.shards import shard_batch, shard_rows


def test_every_row_goes_to_one_rank_with_its_whole_group():
    group_ids = np.array([7, 7, 3, 3, 9, 9, 1, 1, 5, 5])
    shards = shard_rows(group_ids, np.ones(10), 2)
    assert sorted(np.concatenate(shards).tolist()) == list(range(10))
    owners = [{int(g) for g in group_ids[rows]} for rows in shards]
    assert not owners[0] & owners[1]
    assert sorted(len(rows) for rows in shards) == [4, 6]
    assert all((np.diff(rows) > 0).all() for rows in shards)  # batch order kept within a shard


def test_tokens_are_balanced_not_groups():
    group_ids = np.repeat([0, 1, 2, 3], 2)
    tokens = np.repeat([20, 5, 15, 10], 2)  # per row: groups of 40, 10, 30 and 20 tokens
    shards = shard_rows(group_ids, tokens, 2)
    assert [int(tokens[rows].sum()) for rows in shards] == [50, 50]
    # One long group against three short ones: the long one has a rank to itself.
    long_and_short = np.repeat([300, 50, 50, 50], 4)
    shards = shard_rows(np.repeat([0, 1, 2, 3], 4), long_and_short, 2)
    assert [int(long_and_short[rows].sum()) for rows in shards] == [1200, 600]
    assert [len(rows) for rows in shards] == [4, 12]  # by group count it would have been 8 and 8: 1400 and 400


def test_fewer_groups_than_ranks_is_refused_naming_the_keys():
    with pytest.raises(ValueError, match="learner.workers.*prompts_per_step"):
        shard_rows(np.array([0, 0, 1, 1]), np.ones(4), 3)


def test_shards_keep_the_step_width_and_every_column():
    batch = {
        "prompt_ids": np.arange(12).reshape(4, 3),
        "prompt_mask": np.ones((4, 3), dtype=np.int64),
        "completion_mask": np.array([[1, 1], [1, 0], [1, 1], [1, 1]]),
        "advantages": np.array([1.0, -1.0, 0.5, -0.5]),
    }
    shards = shard_batch(batch, np.array([0, 0, 1, 1]), 2)
    assert [shard.keys() == batch.keys() for shard in shards] == [True, True]
    assert {tuple(shard["advantages"]) for shard in shards} == {(1.0, -1.0), (0.5, -0.5)}
    assert all(shard["prompt_ids"].shape == (2, 3) for shard in shards)
