"""The `lora:` section: train a LoRA adapter with PEFT instead of every weight (PEFT's names).

The learner hands it to TRL's `GRPOTrainer` as `peft_config` (workers/learner/lora.py), engines
serve the adapter through vLLM's LoRA support, and after the first load only the adapter travels
(workers/weights/adapters.py). Off (null) by default.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from orchestrator.contracts.strict import StrictModel


class LoraSettings(StrictModel):
    r: int = Field(16, ge=1, le=512, description="Adapter rank (PEFT's r).")
    lora_alpha: float = Field(32, gt=0, description="Scaling numerator: the update is scaled by lora_alpha / r.")
    lora_dropout: float = Field(
        0.0,
        ge=0.0,
        description="Kept at 0: the learner trains with dropout off (TRL's disable_dropout), as the engines sample, so "
        "the loss sees the policy that sampled.",
    )
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear",
        description="Modules that get an adapter: PEFT's names (a list of module-name suffixes such as q_proj, v_proj) "
        "or 'all-linear' (every linear layer but the output layer).",
    )
    modules_to_save: list[str] | None = Field(
        None,
        description="Modules trained whole besides the adapter (PEFT's name). Not supported: vLLM 0.32 serves at most "
        "one classification head whole with an adapter, so a language model's lm_head or embed_tokens cannot be; "
        "leave null.",
    )

    @field_validator("lora_dropout")
    @classmethod
    def _no_dropout(cls, value: float) -> float:
        if value:
            raise ValueError(
                f"lora.lora_dropout {value}: the learner trains with dropout off (TRL's disable_dropout), as the engines "
                "sample, so the loss sees the policy that sampled; set it to 0"
            )
        return value

    @field_validator("modules_to_save")
    @classmethod
    def _no_modules_to_save(cls, value: list[str] | None) -> list[str] | None:
        if value:
            raise ValueError(
                f"lora.modules_to_save {value}: vLLM 0.32 cannot serve a language model's modules trained whole beside an "
                "adapter (it takes one classification head at most), so the engines would sample from another policy "
                "than the learner trains; leave it null, or train the full model (lora: null)"
            )
        return value

    @field_validator("target_modules")
    @classmethod
    def _some_modules(cls, value: list[str] | str) -> list[str] | str:
        if isinstance(value, list) and not value:
            raise ValueError("lora.target_modules is empty: list module names (q_proj, v_proj, ...) or 'all-linear'")
        return value
