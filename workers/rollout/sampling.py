"""Our sampling config -> vLLM `SamplingParams`, and vLLM's outputs -> our samples.

Everything the user asked for is forwarded untouched (`stop`, `stop_token_ids`,
`include_stop_str_in_output`, `skip_special_tokens`, `ignore_eos`). Two choices are ours:
logprobs are the sampled token's, under the processed (temperature-applied) distribution, so the
learner can compare against them; and EOS is never left in the completion text.
"""

from __future__ import annotations

from orchestrator.config.sampling import SamplingConfig
from orchestrator.rollout.groups import Sample


def vllm_params(sampling: SamplingConfig, n: int, group_id: int):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        n=n,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        seed=None if sampling.seed is None else sampling.seed + group_id,
        max_tokens=sampling.max_tokens,
        stop=list(sampling.stop),
        stop_token_ids=list(sampling.stop_token_ids),
        include_stop_str_in_output=sampling.include_stop_str_in_output,
        ignore_eos=sampling.ignore_eos,
        skip_special_tokens=sampling.skip_special_tokens,
        logprobs=0,  # the sampled token's logprob only
        output_kind=RequestOutputKind.FINAL_ONLY,  # all n completions at once, at the end
    )


def to_samples(completions, eos_token_id: int | None, eos_text: str | None) -> list[Sample]:
    """Convert vLLM `CompletionOutput`s (one per sample) into samples, in sample-index order."""
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
            )
        )
    return samples


def _sampled_logprobs(completion) -> list[float]:
    if completion.logprobs is None:
        return []
    return [float(position[token].logprob) for position, token in zip(completion.logprobs, completion.token_ids)]
