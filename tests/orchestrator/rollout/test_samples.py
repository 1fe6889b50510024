"""A step's record of samples: rows taken out of it and records joined keep every column in step."""

import numpy as np

from orchestrator.rollout.parquet import rollout_table
from orchestrator.rollout.samples import StepSamples


def _record(first: int) -> StepSamples:
    samples = StepSamples.from_tokens([[1, 2], [3]], [[first, 5, 6], [first]], [[-0.1, -0.2, -0.3], [-0.4]])
    samples.group_id = samples.group_id + first
    samples.set_scores({"reward": [first, first + 0.5], "rewards/f": [first, np.nan]})
    return samples


def test_joined_records_and_taken_rows_keep_each_sample_whole():
    joined = StepSamples.concat([_record(10), _record(20)])
    assert joined.completion_ids.tolist() == [[10, 5, 6], [10], [20, 5, 6], [20]]
    assert joined.group_id.tolist() == [10, 11, 20, 21]
    assert joined.reward.tolist() == [10, 10.5, 20, 20.5]
    taken = joined.take(np.array([3, 0]))
    assert taken.completion_ids.tolist() == [[20], [10, 5, 6]]
    assert taken.logprobs.tolist() == [[np.float32(-0.4)], [np.float32(-0.1), np.float32(-0.2), np.float32(-0.3)]]
    assert taken.prompt_ids.tolist() == [[3], [1, 2]]
    assert taken.reward.tolist() == [20.5, 10] and np.isnan(taken.rewards["rewards/f"][0])


def test_the_parquet_says_which_samples_were_not_trained_on():
    samples = StepSamples.concat([_record(10), _record(20)])
    assert "filtered" not in rollout_table(samples, step=1).column_names  # no dynamic sampling: all trained on
    samples.filtered = np.array([False, False, True, True])
    samples.advantage = np.array([0.5, -0.5, np.nan, np.nan])
    table = rollout_table(samples, step=1)
    assert table.column("filtered").to_pylist() == [False, False, True, True]
    assert table.column("advantage").to_pylist() == [0.5, -0.5, None, None]


def test_a_sample_an_update_landed_in_is_as_old_as_its_oldest_token_and_the_parquet_has_every_tokens_version():
    from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
    from orchestrator.contracts.sampling import SamplingConfig

    def sample(index, ids, versions=None, mask=None):
        return Sample(index, "", ids, [-0.1] * len(ids), "stop", None, None, tool_mask=mask, output_versions=versions)

    request = GroupRequest(7, 0, "p", [1, 2], 3, SamplingConfig())
    result = GroupResult(
        group_id=7,
        engine_id=0,
        policy_version=4,  # the engine's weights when the group started
        samples=[
            sample(0, [5, 6, 7], versions=[5, 5, 6]),  # queued past one update, then another landed mid-sample
            sample(1, [5, 6, 7, 8], versions=[4, 4, -1, 6], mask=[1, 1, 0, 1]),  # a tool's observation between turns
            sample(2, [5, 6]),  # unlabelled: the group's version throughout
        ],
    )
    samples = StepSamples.assemble([request], [result])
    assert samples.policy_version.tolist() == [5, 4, 4]
    assert samples.output_versions.tolist() == [[5, 5, 6], [4, 4, -1, 6], [4, 4]]
    assert rollout_table(samples, step=1).column("output_versions").to_pylist() == [[5, 5, 6], [4, 4, -1, 6], [4, 4]]
    assert samples.take(np.array([2, 0])).output_versions.tolist() == [[4, 4], [5, 5, 6]]
