"""`prompts: builtin:reset`, TRL's training without a dataset: the environment writes every prompt.

TRL's GRPOTrainer takes no `train_dataset` when an `environment_factory` owns the data: each rollout
starts from an empty user message, and what its environment's `reset()` returns is appended to it
(TRL's reset rule), so the prompt is whatever `reset` wrote. Here a run with `environment_factory` and
no `prompts` does the same, with this one placeholder row drawn over and over (every group its own).
"""

from __future__ import annotations

PLACEHOLDER = [{"role": "user", "content": ""}]  # TRL's placeholder prompt


def records() -> list[dict]:
    return [{"prompt": list(PLACEHOLDER)}]
