"""vLLM outputs -> samples, with stand-in outputs (no engine needed)."""

import types

from orchestrator.contracts.sampling import SamplingConfig
from workers.rollout.sampling import to_samples, vllm_params

EOS = 0


def _completion(index, text, token_ids, finish_reason="stop", stop_reason=None, weight_versions=None):
    logprobs = [{t: types.SimpleNamespace(logprob=-0.25 * (i + 1))} for i, t in enumerate(token_ids)]
    return types.SimpleNamespace(
        index=index,
        text=text,
        token_ids=token_ids,
        finish_reason=finish_reason,
        stop_reason=stop_reason,
        logprobs=logprobs,
        weight_versions=weight_versions,
    )


def test_eos_is_not_left_in_the_text_but_stays_in_the_ids():
    [sample] = to_samples([_completion(0, " <search> a </search><eos>", [5, 6, 7, 8, EOS])], EOS, "<eos>")
    assert sample.completion == " <search> a </search>"
    assert sample.completion_ids[-1] == EOS
    assert sample.stop_reason is None and sample.finish_reason == "stop"
    assert sample.logprobs == [-0.25, -0.5, -0.75, -1.0, -1.25]


def test_stop_string_and_stop_token_are_recorded():
    samples = to_samples(
        [
            _completion(1, " <search>", [5, 6], stop_reason=6),
            _completion(0, " <search>", [5, 6], stop_reason="<search>"),
            _completion(2, " x x x", [9, 9, 9], finish_reason="length"),
        ],
        EOS,
        "<eos>",
    )
    assert [s.sample_index for s in samples] == [0, 1, 2]
    assert (samples[0].stop_reason, samples[0].stop_token_id) == ("<search>", None)
    assert (samples[1].stop_reason, samples[1].stop_token_id) == ("6", 6)
    assert (samples[2].finish_reason, samples[2].stop_reason) == ("length", None)


def test_params_forward_everything_and_seed_follows_the_group():
    sampling = SamplingConfig(max_tokens=7, temperature=0.5, top_p=0.9, top_k=5, seed=100, stop=["<search>"], stop_token_ids=[42])
    params = vllm_params(sampling, n=3, group_id=4)
    assert (params.n, params.max_tokens, params.temperature, params.top_p, params.top_k) == (3, 7, 0.5, 0.9, 5)
    assert params.stop == ["<search>"] and 42 in params.stop_token_ids
    assert params.include_stop_str_in_output and not params.skip_special_tokens and not params.ignore_eos
    assert params.seed == 104 and params.logprobs == 0


def test_each_token_takes_the_version_of_the_weight_span_that_sampled_it():
    """vLLM labels spans of output tokens with the weights' version (an update landed after token 2 here)."""
    from vllm.outputs import WeightVersionSpan

    spans = [WeightVersionSpan("3", 0, 2), WeightVersionSpan("4", 2, 5)]
    [sample] = to_samples([_completion(0, "abcde", [5, 6, 7, 8, 9], weight_versions=spans)], EOS, "<eos>")
    assert sample.output_versions == [3, 3, 4, 4, 4]
    # weights an engine started with and never labelled, or no labels at all: the group's version stands
    [unlabelled] = to_samples([_completion(0, "ab", [5, 6], weight_versions=[WeightVersionSpan("default", 0, 2)])], EOS, None)
    [bare] = to_samples([_completion(0, "ab", [5, 6])], EOS, None)
    assert unlabelled.output_versions is None and bare.output_versions is None
