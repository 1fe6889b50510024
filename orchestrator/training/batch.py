"""The learner's batch, assembled from the step's rollout table (Arrow) as padded numpy arrays.

Prompts are left-padded and completions right-padded, as TRL expects. The completion mask covers
every generated token up to and including the one that ended the sample (EOS or a stop token):
nothing past the stop exists, so nothing past it is trained on. The engines' logprobs become the
behaviour (old) logprobs. Token ids come straight from the engines: nothing is re-tokenised.

Multi-turn samples also carry TRL's `tool_mask` (1: the model's token, 0: a tool's observation
token): observation tokens stay in the completion mask, so the model attends to them, but TRL
leaves them out of the loss, and the learner out of the logprob comparison.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def learner_batch(table: pa.Table, advantages: np.ndarray, pad_token_id: int) -> dict[str, np.ndarray]:
    prompts = table.column("prompt_ids").to_pylist()
    completions = table.column("completion_ids").to_pylist()
    logprobs = table.column("logprobs").to_pylist()
    rows = len(prompts)
    observed = table.column("observation_mask").to_pylist() if "observation_mask" in table.column_names else [[]] * rows
    prompt_width = max(len(p) for p in prompts)
    completion_width = max(1, max(len(c) for c in completions))
    batch = {
        "prompt_ids": np.full((rows, prompt_width), pad_token_id, dtype=np.int64),
        "prompt_mask": np.zeros((rows, prompt_width), dtype=np.int64),
        "completion_ids": np.full((rows, completion_width), pad_token_id, dtype=np.int64),
        "completion_mask": np.zeros((rows, completion_width), dtype=np.int64),
        "old_per_token_logps": np.zeros((rows, completion_width), dtype=np.float32),
        "advantages": np.asarray(advantages, dtype=np.float32),
    }
    if any(any(mask) for mask in observed):
        batch["tool_mask"] = np.ones((rows, completion_width), dtype=np.int64)
    for row, (prompt, completion, logp, mask) in enumerate(zip(prompts, completions, logprobs, observed)):
        if len(logp) != len(completion):
            raise ValueError(f"row {row}: {len(completion)} completion tokens but {len(logp)} logprobs")
        batch["prompt_ids"][row, prompt_width - len(prompt) :] = prompt
        batch["prompt_mask"][row, prompt_width - len(prompt) :] = 1
        batch["completion_ids"][row, : len(completion)] = completion
        batch["completion_mask"][row, : len(completion)] = 1
        batch["old_per_token_logps"][row, : len(completion)] = [0.0 if value is None else value for value in logp]
        if "tool_mask" in batch:
            batch["tool_mask"][row, : len(completion)] = 1 - np.asarray(mask, dtype=np.int64)
    return batch
