import numpy as np

from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rollout.samples import StepSamples
from orchestrator.training.batch import learner_batch

PAD = 0


def _samples(*rows) -> StepSamples:
    """One group per row: (prompt ids, completion ids, logprobs, tool_mask or None)."""
    requests, results = [], []
    for group, (prompt, completion, logprobs, tool_mask) in enumerate(rows):
        requests.append(GroupRequest(group, group, "p", prompt, 1, SamplingConfig()))
        sample = Sample(0, "c", completion, logprobs, "stop", None, None, tool_mask=tool_mask)
        results.append(GroupResult(group, 0, 0, [sample]))
    return StepSamples.assemble(requests, results)


def test_prompts_left_padded_completions_right_padded_mask_ends_at_the_stop():
    samples = _samples(([5, 6, 7], [11, 12, 2], [-0.1, -0.2, -0.3], None), ([8], [13], [-0.4], None))  # 2 = EOS
    batch = learner_batch(samples, np.array([1.0, -1.0]), PAD)
    assert batch["prompt_ids"].tolist() == [[5, 6, 7], [PAD, PAD, 8]]
    assert batch["prompt_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch["completion_ids"].tolist() == [[11, 12, 2], [13, PAD, PAD]]
    assert batch["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert np.allclose(batch["sampling_per_token_logps"], [[-0.1, -0.2, -0.3], [-0.4, 0, 0]])
    assert batch["advantages"].tolist() == [1.0, -1.0]


def test_observation_tokens_are_attended_but_left_out_of_the_loss():
    samples = _samples(
        ([5], [11, 90, 91, 12, 2], [-0.1, None, None, -0.2, -0.3], [1, 0, 0, 1, 1]),  # 90, 91: a tool's observation
        ([6], [13, 2], [-0.4, -0.5], [1, 1]),
    )
    batch = learner_batch(samples, np.array([1.0, -1.0]), PAD)
    assert batch["completion_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]  # the model sees the observation
    assert batch["tool_mask"].tolist() == [[1, 0, 0, 1, 1], [1, 1, 1, 1, 1]]  # TRL's loss does not
    assert np.allclose(batch["sampling_per_token_logps"], [[-0.1, 0, 0, -0.2, -0.3], [-0.4, -0.5, 0, 0, 0]])


def test_single_turn_batches_carry_no_tool_mask():
    assert "tool_mask" not in learner_batch(_samples(([5], [11], [-0.1], [1])), np.array([0.0]), PAD)


def test_an_empty_completion_still_gets_a_column():
    batch = learner_batch(_samples(([5], [], [], None), ([6], [], [], None)), np.array([0.0, 0.0]), PAD)
    assert batch["completion_ids"].shape == (2, 1) and batch["completion_mask"].tolist() == [[0], [0]]


def test_mask_truncated_completions_leaves_cut_off_samples_out_of_the_loss():
    samples = _samples(([5], [11, 2], [-0.1, -0.2], None), ([6], [13, 14], [-0.4, -0.5], None))
    samples.finish_reason[1] = "length"  # cut off at max_completion_length
    assert "loss_rows" not in learner_batch(samples, np.array([1.0, -1.0]), PAD)
    batch = learner_batch(samples, np.array([1.0, -1.0]), PAD, mask_truncated=True)
    assert batch["loss_rows"].tolist() == [1, 0]
    assert batch["completion_mask"].tolist() == [[1, 1], [1, 1]]  # still attended, as TRL's tool tokens are


def test_samples_of_an_older_policy_are_marked_stale():
    samples = _samples(([5], [11, 2], [-0.1, -0.2], None), ([6], [13, 2], [-0.4, -0.5], None))
    samples.policy_version = np.array([3, 2])
    assert "stale_rows" not in learner_batch(samples, np.array([1.0, -1.0]), PAD, learner_version=2)
    assert learner_batch(samples, np.array([1.0, -1.0]), PAD, learner_version=3)["stale_rows"].tolist() == [0, 1]


def test_a_truncated_split_session_is_left_out_of_the_loss_in_every_segment():
    """agent.on_prefix_mismatch: split: the session ran out of tokens in its last segment; its first segment
    would otherwise train with the reward of a conversation cut off."""
    request = GroupRequest(0, 0, "p", [5], 2, SamplingConfig())
    segments = [
        Sample(0, "a", [11], [-0.1], "stop", None, None, segment=0),
        Sample(0, "b", [12], [-0.2], "length", None, None, segment=1),
        Sample(1, "c", [13], [-0.3], "stop", None, None),
    ]
    samples = StepSamples.assemble([request], [GroupResult(0, 0, 0, segments)])
    batch = learner_batch(samples, np.array([1.0, 1.0, -1.0]), PAD, mask_truncated=True)
    assert batch["loss_rows"].tolist() == [0, 0, 1]
