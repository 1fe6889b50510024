"""LLM judges: frozen models that reward functions ask questions, each served by a vLLM engine pool of
its own (`judges:` in the run config), and what a judge call returns.

    judges:
      quality:
        model: path/to/judge          # a causal LM folder or hub id (or builtin:...), never trained
        max_tokens: 1                 # a call's answer budget unless the call says otherwise
        timeout_s: 60                 # a call's deadline
        pool: {engines: 1}            # the rollout pool's engine settings (rollout.*), for the judge's engines

A reward function that takes `judges` (or `**kwargs`) gets {name: client} (orchestrator/judges/client.py).
"""

from __future__ import annotations

import dataclasses

from pydantic import Field, model_validator

from orchestrator.contracts.paths import PATH
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.strict import StrictModel


class JudgeSettings(StrictModel):
    model: str = Field(
        description="The judge: a causal LM folder, a hub id, or a built-in ('builtin:lookup'). Its engines load it "
        "from their node's disk (or cache) and never receive weights.",
        json_schema_extra=PATH,
    )
    tokenizer: str | None = Field(None, description="Its tokenizer, when not the model's own.", json_schema_extra=PATH)
    max_tokens: int = Field(16, ge=1, description="Tokens a call may generate, unless the call asks for fewer or more.")
    timeout_s: float = Field(
        60.0,
        gt=0.0,
        description="Deadline of one call, from when the reward function makes it: past it the call raises "
        "JudgeTimeoutError in the reward function (scored as any raising function: reward_error_score or an error).",
    )
    pool: RolloutConfig = Field(
        default_factory=RolloutConfig,
        description="The judge's engines, with the rollout pool's settings (engines, dtype, max_model_len, "
        "max_inflight_samples, num_cpus_per_engine, health checks, max_restarts, ...).",
    )

    @model_validator(mode="after")
    def _fixed_size(self) -> JudgeSettings:
        if self.pool.autoscale is not None:
            raise ValueError("pool.autoscale: a judge's pool keeps its size (pool.engines); autoscaling is the rollout pool's")
        return self


@dataclasses.dataclass(frozen=True)
class JudgeCompletion:
    """One answer of a judge to one prompt."""

    text: str
    token_ids: list[int]
    logprobs: list[float]  # of each generated token
    top_logprobs: list[dict[str, float]]  # per position, with `top_logprobs=k`: the k likeliest tokens' texts -> logprob
    prompt_tokens: int
