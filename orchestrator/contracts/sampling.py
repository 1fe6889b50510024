"""How every completion is sampled. Sent as is to each rollout engine with every group."""

from __future__ import annotations

from pydantic import Field

from orchestrator.contracts.strict import StrictModel


class SamplingConfig(StrictModel):
    max_tokens: int = Field(64, ge=1, description="Completion budget per sample, in tokens.")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature; logprobs are of this distribution.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(-1, ge=-1, description="Keep the k most likely tokens; -1 keeps all.")
    seed: int | None = Field(
        None, description="Base seed. Group g is sampled with seed+g, so results do not depend on which engine ran it."
    )
    stop: list[str] = Field(default_factory=list, description="Stop strings (e.g. '<search>').")
    stop_token_ids: list[int] = Field(default_factory=list, description="Stop token ids, in addition to EOS.")
    include_stop_str_in_output: bool = Field(
        True, description="Keep the stop string (or stop token) at the end of the completion text."
    )
    ignore_eos: bool = Field(False, description="Do not stop at EOS. Opt-in only, for benchmarks.")
    skip_special_tokens: bool = Field(
        False,
        description="Drop special tokens from the text. Off: added tokens such as <search> stay visible, and "
        "special-token stop strings can fire (with it on they never do).",
    )
    top_logprobs: int = Field(
        0,
        ge=0,
        le=20,
        description="Also return the logprobs of the k most likely tokens at each position (OpenAI's name; vLLM's "
        "`logprobs`). Judge calls use it; rollouts leave it 0.",
    )
    allowed_token_ids: list[int] | None = Field(
        None, description="Sample only among these tokens (vLLM's name). Judge calls use it to ask for one of a few answers."
    )
