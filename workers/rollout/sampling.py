"""Our sampling config -> vLLM `SamplingParams`, and vLLM's outputs -> our samples.

Everything the user asked for is forwarded untouched (`stop`, `stop_token_ids`,
`include_stop_str_in_output`, `skip_special_tokens`, `ignore_eos`), except that turns of a tool
run keep every stop string in the output (the loop reads the tool call from it). Two choices are ours:
logprobs are the sampled token's, under the processed (temperature-applied) distribution, so the
learner can compare against them; and EOS is never left in the completion text.
"""

from __future__ import annotations

from orchestrator.contracts.groups import Sample
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.contracts.tools import ToolUse
from workers.rollout.multi_turn import Turn


def vllm_params(sampling: SamplingConfig, n: int, group_id: int):
    seed = None if sampling.seed is None else sampling.seed + group_id
    return _params(
        sampling, n, seed, sampling.max_tokens, sampling.stop, sampling.stop_token_ids, sampling.include_stop_str_in_output
    )


def continue_params(sampling: SamplingConfig, max_tokens: int, seed: int | None):
    """One sample continued from its last token on another engine (continuation.py): what is left of its budget."""
    return _params(sampling, 1, seed, max_tokens, sampling.stop, sampling.stop_token_ids, sampling.include_stop_str_in_output)


def turn_params(sampling: SamplingConfig, use: ToolUse, max_tokens: int, seed: int | None, end_tag_ids: list[int]):
    """One turn of one multi-turn sample: the user's sampling plus a stop at every tool's end tag
    (by token id where the tag is one token), kept in the output so the call can be read."""
    stop = [*sampling.stop, *(tool.end for tool in use.tools)]
    return _params(sampling, 1, seed, max_tokens, stop, [*sampling.stop_token_ids, *end_tag_ids], include_stop=True)


def _params(sampling: SamplingConfig, n: int, seed: int | None, max_tokens: int, stop, stop_token_ids, include_stop: bool):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        n=n,
        **distribution(sampling, seed),
        max_tokens=max_tokens,
        stop=list(stop),
        stop_token_ids=list(stop_token_ids),
        include_stop_str_in_output=include_stop,
        ignore_eos=sampling.ignore_eos,
        skip_special_tokens=sampling.skip_special_tokens,
        logprobs=sampling.top_logprobs,  # 0: the sampled token's logprob only
        allowed_token_ids=sampling.allowed_token_ids,
        output_kind=RequestOutputKind.FINAL_ONLY,  # all n completions at once, at the end
    )


def distribution(sampling: SamplingConfig, seed: int | None) -> dict:
    """What shapes the distribution each token is drawn from, in vLLM's names (`SamplingParams` and the
    OpenAI request models share them): the run's settings, and neutral values for those the run does not
    expose. Rollouts, tool turns and agent calls all sample from this; the learner scores under it."""
    return {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "seed": seed,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }


def turn_seed(sampling: SamplingConfig, group_id: int, sample_index: int, turn: int) -> int | None:
    """Each turn of each sample gets its own seed, so results do not depend on the engine."""
    if sampling.seed is None:
        return None
    return (((sampling.seed + group_id) * 1_000_003 + sample_index) * 1_009 + turn) % (1 << 63)


def to_turn(completion) -> Turn:
    return Turn(
        token_ids=list(completion.token_ids),
        text=completion.text,
        logprobs=_sampled_logprobs(completion),
        finish_reason=str(completion.finish_reason),
        stop_reason=completion.stop_reason,
        versions=output_versions(completion),
    )


def to_samples(completions, eos_token_id: int | None, eos_text: str | None, top_logprobs: int = 0) -> list[Sample]:
    """Convert vLLM `CompletionOutput`s (one per sample) into samples, in sample-index order; with
    `top_logprobs` > 0 each keeps the most likely tokens' logprobs at every position."""
    samples = []
    for completion in sorted(completions, key=lambda c: c.index):
        token_ids = list(completion.token_ids)
        text = completion.text
        ended_at_eos = bool(token_ids) and token_ids[-1] == eos_token_id and completion.finish_reason == "stop"
        if ended_at_eos and eos_text and text.endswith(eos_text):
            text = text[: -len(eos_text)]
        stop_reason = completion.stop_reason
        stop_token_id = stop_reason if isinstance(stop_reason, int) else None
        samples.append(
            Sample(
                sample_index=completion.index,
                completion=text,
                completion_ids=token_ids,
                logprobs=_sampled_logprobs(completion),
                finish_reason=str(completion.finish_reason),
                stop_reason=None if stop_reason is None else str(stop_reason),
                stop_token_id=stop_token_id,
                top_logprobs=_top_logprobs(completion, top_logprobs) if top_logprobs else None,
                output_versions=output_versions(completion),
            )
        )
    return samples


def output_versions(completion) -> list[int] | None:
    """The policy version of each sampled token, from vLLM's weight-version spans (the engine labels its
    weights with the policy version at every load: workers/weights/receiving.py); None when unlabelled (an
    engine serving the weights it started with labels them "default")."""
    spans = completion.weight_versions
    if not spans or not all(span.version.isdigit() for span in spans):
        return None
    return [int(span.version) for span in spans for _ in range(span.end - span.start)]


def _top_logprobs(completion, k: int) -> list[dict[int, float]]:
    """The k most likely tokens at each position, by vLLM's rank (the sampled token, when it is not among
    them, is the `logprobs` entry, not this one)."""
    return [
        {token: float(entry.logprob) for token, entry in position.items() if entry.rank is not None and entry.rank <= k}
        for position in completion.logprobs or []
    ]


def _sampled_logprobs(completion) -> list[float]:
    if completion.logprobs is None:
        return []
    return [float(position[token].logprob) for position, token in zip(completion.logprobs, completion.token_ids)]


def cache_salt(policy_version: int) -> str:
    """What a request's prefix-cache blocks are salted with: a request never reuses blocks that another
    policy version's weights computed, even when the cache was kept across an update
    (rollout.kv_cache_after_update: keep)."""
    return f"policy-v{policy_version}"
