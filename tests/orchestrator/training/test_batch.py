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
