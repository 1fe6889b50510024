"""The `prompts` sources of `train`'s config: one source's settings (`PromptSource`, an entry of
`prompts: [{source, ratio, ...}]`) and reasoning-gym's (`reasoning_gym:`), with the checks of
`prompts` as written that choose `reward_funcs`' default (config/train.py)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, model_validator

from orchestrator.contracts.paths import PATH, SPEC
from orchestrator.contracts.strict import StrictModel


class PromptSource(StrictModel):
    source: str = Field(
        description="What to read, as `prompts` takes it: a file, a dataset, builtin:NAME or reasoning_gym:TASK.",
        json_schema_extra=PATH,
    )
    ratio: float = Field(1.0, gt=0.0, description="This source's share of the prompts drawn (the ratios are normalised).")
    name: str | None = Field(
        None, description="The source's name in the metrics (sources/NAME/...); default: the source with / and : as _."
    )
    split: str | None = Field(None, description="As prompts_split, for this source (default: prompts_split).")
    subset: str | None = Field(None, description="As prompts_subset, for this source (default: prompts_subset).")
    column: str | None = Field(None, description="As prompts_column, for this source (default: prompts_column).")
    reward_funcs: list[str] | None = Field(
        None,
        description="This source's own reward functions, as reward_funcs takes them: they alone score its rows. "
        "Null: the top-level reward_funcs score them.",
        json_schema_extra=SPEC,
    )
    max_completion_length: int | None = Field(
        None,
        ge=1,
        description="This source's completion budget in tokens, at most the top-level max_completion_length (the "
        "learner's). Null: the top-level one.",
    )
    environment: str | None = Field(
        None,
        description="The environment_factory entry (by name, with {name: class, ...}) every row of this source runs "
        "in: it sets the rows' 'environment' column. Null: the rows' own 'environment' column says.",
    )
    reward_weights: list[float] | None = Field(
        None,
        description="One weight per entry of this source's reward_funcs (default: a function's weight elsewhere in "
        "the config, else 1). A function has one weight in a run.",
    )

    @property
    def label(self) -> str:
        return self.name or re.sub(r"[/:\\]+", "_", self.source).strip("_")

    @model_validator(mode="after")
    def _weights_match(self) -> PromptSource:
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs or []):
            raise ValueError(
                f"reward_weights has {len(self.reward_weights)} entries but this source's reward_funcs has "
                f"{len(self.reward_funcs or [])}: give one weight per function"
            )
        return self


def all_scored_by_their_own(prompts) -> bool:
    """Whether `prompts` (as written in the config) is a list of sources that each have reward_funcs."""
    return isinstance(prompts, list) and bool(prompts) and all(_own_rewards(source) for source in prompts)


def _own_rewards(source) -> bool:
    funcs = source.get("reward_funcs") if isinstance(source, dict) else getattr(source, "reward_funcs", None)
    return funcs is not None


def all_reasoning_gym(prompts) -> bool:
    """Whether `prompts` (as written in the config) names reasoning-gym tasks only."""
    sources = prompts if isinstance(prompts, list) else [prompts]
    names = [source.get("source") if isinstance(source, dict) else getattr(source, "source", source) for source in sources]
    return bool(names) and all(isinstance(name, str) and name.startswith("reasoning_gym:") for name in names)


class ReasoningGymConfig(StrictModel):
    size: int = Field(1000, ge=1, description="Questions generated for a reasoning_gym source (the held-out set too).")
    seed: int | None = Field(
        None, description="The seed reasoning-gym generates them with; null: the run's seed. The held-out set uses seed + 1."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="The task's own config (reasoning-gym's config class of the task, e.g. max_terms for "
        "basic_arithmetic); for the composite task, datasets: [{name, weight, config}].",
    )
    system_prompt: str | None = Field(
        "default",
        description="The system message of each question: one of reasoning-gym's SYSTEM_PROMPTS (default, "
        "DeepSeekZero, simple, direct, chain_of_draft), all of which ask for the answer in <answer> tags; null: none.",
    )
