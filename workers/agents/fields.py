"""Which fields of an agent's request the gateway takes: an allowlist over vLLM's own request models
(`ChatCompletionRequest`, `CompletionRequest`). Every field vLLM knows is in exactly one of three sets, and
a test checks that against vLLM's models, so a vLLM upgrade that adds a field fails until it is placed.

- `TAKEN`: passed to vLLM as the agent sent it (what to say, when to stop, what to show, tool calling).
- `SET_BY_RUN`: whatever the agent sends, the gateway replaces it (the run's sampling, the call's token
  limit, the ids the session recorded); `max_tokens` is kept as an upper bound.
- `REFUSED`: a 400 that names the field, when present with any value but null (JSON null is the field's
  default): `0` and `false` are refused too. These change the distribution sampled in ways the learner
  cannot reproduce, make vLLM see other ids than the ones recorded, or are not for a text policy.

A field vLLM does not know is refused the same way (vLLM itself would ignore it with a warning).
"""

from __future__ import annotations

TAKEN = frozenset(
    {
        "messages",
        "prompt",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "stop_token_ids",
        "include_stop_str_in_output",
        "ignore_eos",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "add_special_tokens",
        "add_generation_prompt",
        "chat_template_kwargs",
        "documents",
        "include_reasoning",
        "reasoning_effort",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "structured_outputs",  # masks the distribution: the recorded logprobs are those of the masked one
        "logprobs",
        "top_logprobs",
        "return_token_ids",
        "return_tokens_as_token_ids",
        "return_token_offsets",
        "return_prompt_text",
        "stream",  # only false: checked by the gateway
        "stream_options",
        "stream_interval",
        "n",  # only 1: checked by the gateway
        "user",
        "priority",
    }
)
SET_BY_RUN = frozenset(
    {
        "model",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "min_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "use_beam_search",
        "request_id",
        "cache_salt",  # each policy version salts the prefix cache (workers/rollout/engine.py: cache_salt)
    }
)
REFUSED = frozenset(
    {
        # the distribution sampled, changed in ways the learner cannot reproduce
        "logit_bias",
        "allowed_token_ids",
        "bad_words",
        "min_tokens",
        "length_penalty",
        "thinking_token_budget",
        "watermarking",
        "repetition_detection",
        "vllm_xargs",
        # other ids than the ones recorded, or other text than the session's
        "echo",
        "suffix",
        "continue_final_message",
        "truncate_prompt_tokens",
        "truncation_side",
        "chat_template",  # a template from the request: the server's own renders every call
        "kv_transfer_params",  # the gateway's own channel for the session's ids
        "ec_transfer_params",
        "prompt_embeds",
        "session_id",
        # extra work on the engine the run does not use
        "logprob_token_ids",
        "prompt_logprobs",
        "routed_experts_prompt_start",
        # not for a text policy
        "mm_payload",
        "media_io_kwargs",
        "mm_processor_kwargs",
        "return_mm_kwargs",
    }
)
KNOWN = TAKEN | SET_BY_RUN | REFUSED


class FieldRefused(ValueError):
    pass


def request(body: dict, run: dict, limit_key: str, left: int) -> dict:
    """What vLLM gets for an agent's request `body`: its fields, with `run` (values for every field of
    `SET_BY_RUN`) over what it sent, and the call's token limit under `limit_key`: what the agent asked
    for, cut to the `left` tokens of its session. Raises FieldRefused naming the first field not taken."""
    for key, value in body.items():
        if value is not None and (key in REFUSED or key not in KNOWN):
            why = (
                "it would make the trained tokens differ from what the learner can score"
                if key in REFUSED
                else "not a field of vLLM's request"
            )
            raise FieldRefused(f"{key}: not taken by the gateway ({why}; workers/agents/fields.py lists what is)")
    asked = body.get("max_completion_tokens") or body.get("max_tokens")
    taken = {key: value for key, value in body.items() if key not in ("max_tokens", "max_completion_tokens")}
    return {**taken, **run, limit_key: min(asked or left, left)}
