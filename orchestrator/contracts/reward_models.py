"""Reward models: `reward_funcs` entries that are models, scored as TRL's GRPOTrainer scores them,
and the `reward_models:` section that sizes and places the actor group serving them.

TRL loads a string in `reward_funcs` as `AutoModelForSequenceClassification(num_labels=1)` and rewards
each sample with `logits[:, 0]` of prompt + completion (a conversation through the reward model's own
chat template). Here every reward function is written with a name after a colon (`file.py:name`,
`package.module:name`, `builtin:NAME`), so an entry with no `:NAME` is a model: a folder or a hub id.
`reward_processing_classes` (TRL's name) gives a reward model another tokenizer than its own.
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.contracts.environments import ENVIRONMENT_REWARD
from orchestrator.contracts.strict import StrictModel


def is_model(spec: str) -> bool:
    """Whether a `reward_funcs` entry names a reward model rather than a function."""
    return ":" not in spec and not spec.endswith(".py")


def reward_name(spec: str) -> str:
    """A reward's name in metrics and Parquet (`rewards/<name>`): a function's spec as written; a model's
    last path component, as TRL names a reward model (`reward_func_names`); an environment's get_reward, its
    class name (TRL's)."""
    if spec.startswith(ENVIRONMENT_REWARD):
        return spec.removeprefix(ENVIRONMENT_REWARD)
    return spec.rstrip("/").rsplit("/", 1)[-1] if is_model(spec) else spec


class RewardModelSettings(StrictModel):
    workers: int = Field(
        1,
        ge=1,
        description="Ray actors that serve the reward models (each holds every reward model of the run); each reward "
        "task's samples are split evenly over them, so more workers score a task's samples sooner.",
    )
    num_cpus: float = Field(1.0, ge=0.0, description="Ray CPUs each reward-model worker reserves.")
    num_gpus: float = Field(0.0, ge=0.0, description="GPUs each reward-model worker reserves (a fraction shares one).")
    max_batch_tokens: int = Field(
        8192,
        ge=1,
        description="Token slots (longest sequence x rows) of one forward pass: a task's samples are sorted by length "
        "and scored in batches under this. The scores do not depend on it (up to float rounding).",
    )
    max_restarts: int = Field(
        3,
        ge=0,
        description="Times a worker that dies is restarted; the batch it was scoring is scored again by the restarted "
        "worker (Ray's actor restart and task retry).",
    )
