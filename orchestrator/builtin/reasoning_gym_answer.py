"""`builtin:reasoning_gym`: a reasoning-gym task's own score of each completion's answer.

The answer is what the completion's last `<answer>...</answer>` holds, extracted as reasoning-gym's
own training examples extract it (`reasoning_gym.utils.extract_answer`), and scored by the task's
`score_answer` against the entry that generated the prompt (rebuilt from the `reasoning_gym` column:
data/reasoning_gym.py). Most tasks give 1.0 for the exact answer and partial credit for an answer
that contains it; a completion without the tags scores what the task gives no answer (0 for most).
A row of another prompt source (no `reasoning_gym` value) gets None: the function does not apply to
it, as TRL reads None, and the run's other reward functions score it.

    prompts: reasoning_gym:basic_arithmetic
    reward_funcs: [builtin:reasoning_gym]       # the default for a reasoning_gym source

Completions come as text, or as TRL's conversational `[{"role": "assistant", "content": ...}]`.
"""

from __future__ import annotations

import functools
import json

from orchestrator.builtin.math_answer import completion_text


def reasoning_gym_reward(completions, reasoning_gym, **kwargs) -> list[float | None]:
    """TRL reward signature; `reasoning_gym` is the column data/reasoning_gym.py writes."""
    from reasoning_gym.utils import extract_answer

    scores = []
    for completion, source in zip(completions, reasoning_gym, strict=True):
        if source is None:  # a row of another source (weighted sources): TRL's "does not apply"
            scores.append(None)
            continue
        task, entry = _entry(source)
        answer = extract_answer(completion_text(completion), tag_name="answer")
        scores.append(float(task.score_answer(answer, entry)))
    return scores


def _entry(source: str):
    """(the task's dataset, the entry) that a `reasoning_gym` cell names."""
    fields = json.loads(source)
    task = _dataset(fields["task"], json.dumps(fields["config"], sort_keys=True))
    return task, task[fields["index"]]


@functools.lru_cache(maxsize=16)
def _dataset(task: str, config: str):
    """One dataset per task and config in this process (a reward worker scores many batches)."""
    from orchestrator.data.reasoning_gym import dataset

    return dataset(task, json.loads(config))
