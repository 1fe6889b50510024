import numpy as np
import pyarrow as pa

from orchestrator.training.batch import learner_batch

PAD = 0


def test_prompts_left_padded_completions_right_padded_mask_ends_at_the_stop():
    table = pa.table(
        {
            "prompt_ids": [[5, 6, 7], [8]],
            "completion_ids": [[11, 12, 2], [13]],  # 2 = EOS ends the first sample
            "logprobs": [[-0.1, -0.2, -0.3], [-0.4]],
        }
    )
    batch = learner_batch(table, np.array([1.0, -1.0]), PAD)
    assert batch["prompt_ids"].tolist() == [[5, 6, 7], [PAD, PAD, 8]]
    assert batch["prompt_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch["completion_ids"].tolist() == [[11, 12, 2], [13, PAD, PAD]]
    assert batch["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert np.allclose(batch["old_per_token_logps"], [[-0.1, -0.2, -0.3], [-0.4, 0, 0]])
    assert batch["advantages"].tolist() == [1.0, -1.0]


def test_observation_tokens_are_attended_but_left_out_of_the_loss():
    table = pa.table(
        {
            "prompt_ids": [[5], [6]],
            "completion_ids": [[11, 90, 91, 12, 2], [13, 2]],  # 90, 91: a tool's observation
            "logprobs": [[-0.1, None, None, -0.2, -0.3], [-0.4, -0.5]],
            "observation_mask": [[0, 1, 1, 0, 0], [0, 0]],
        }
    )
    batch = learner_batch(table, np.array([1.0, -1.0]), PAD)
    assert batch["completion_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]  # the model sees the observation
    assert batch["tool_mask"].tolist() == [[1, 0, 0, 1, 1], [1, 1, 1, 1, 1]]  # TRL's loss does not
    assert np.allclose(batch["old_per_token_logps"], [[-0.1, 0, 0, -0.2, -0.3], [-0.4, -0.5, 0, 0, 0]])


def test_single_turn_batches_carry_no_tool_mask():
    table = pa.table({"prompt_ids": [[5]], "completion_ids": [[11]], "logprobs": [[-0.1]], "observation_mask": [[0]]})
    assert "tool_mask" not in learner_batch(table, np.array([0.0]), PAD)
