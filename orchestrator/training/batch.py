"""Where a sample is trained on: the learner's batch, padded numpy arrays made from the step's samples.

Prompts are left-padded and completions right-padded, as TRL expects. The completion mask covers
every generated token up to and including the one that ended the sample (EOS or a stop token):
nothing past the stop exists, so nothing past it is trained on. The engines' logprobs are TRL's
`sampling_per_token_logps`, which the learner's importance-sampling correction weighs against its
own. Token ids come straight from the engines: nothing is re-tokenised.

With `mask_truncated` (TRL's `mask_truncated_completions`), samples cut off at the completion budget
(finish reason "length") get `loss_rows` 0: generated, rewarded, in the group's advantages, but left
out of the loss. Given the learner's policy version, samples of an older one (async mode) are marked
`stale_rows`: the learner clips them against the engines' log-probs (workers/learner/grpo.py).

Multi-turn samples also carry TRL's `tool_mask` (1: the model's token, 0: a tool's observation
token): observation tokens stay in the completion mask, so the model attends to them, but TRL
leaves them out of the loss, and the learner out of the logprob comparison.
"""

from __future__ import annotations

import numpy as np

from orchestrator.rollout.samples import StepSamples


def learner_batch(
    samples: StepSamples,
    advantages: np.ndarray,
    pad_token_id: int,
    mask_truncated: bool = False,
    learner_version: int | None = None,
) -> dict[str, np.ndarray]:
    for name, column in (("logprobs", samples.logprobs), ("tool_mask", samples.tool_mask)):
        wrong = np.flatnonzero(column.lengths != samples.completion_ids.lengths)
        if wrong.size:
            row = int(wrong[0])
            raise ValueError(
                f"row {row}: {samples.completion_ids.lengths[row]} completion tokens but {column.lengths[row]} {name}"
            )
    prompt_width = int(samples.prompt_ids.lengths.max())
    completion_width = max(1, int(samples.completion_ids.lengths.max()))
    prompt_ids, prompt_mask = samples.prompt_ids.padded(prompt_width, pad_token_id, np.int64, left=True)
    completion_ids, completion_mask = samples.completion_ids.padded(completion_width, pad_token_id, np.int64)
    logps, _ = samples.logprobs.padded(completion_width, 0.0, np.float32)
    batch = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "sampling_per_token_logps": np.where(np.isnan(logps), np.float32(0.0), logps),  # observations have none
        "advantages": np.asarray(advantages, dtype=np.float32),
    }
    if not samples.tool_mask.values.all():
        batch["tool_mask"], _ = samples.tool_mask.padded(completion_width, 1, np.int64)
    if mask_truncated:  # a split agent session is truncated where its last segment is: all its rows are masked
        batch["loss_rows"] = (samples.finish_reason[samples.session_last_rows()] != "length").astype(np.int64)
    if learner_version is not None and (samples.policy_version < learner_version).any():
        batch["stale_rows"] = (samples.policy_version < learner_version).astype(np.int64)
    return batch
