"""Generation throughput on the same model, prompts and lengths: raw vLLM (`LLM.generate`, one
process, one engine), our pool (same engine count), and HF transformers `generate` (what TRL does
without vLLM). With `ignore_eos` every sample generates exactly `max_tokens` tokens (HF's best
case: a static batch wastes nothing); without it samples end at EOS with varied lengths, and only
the tokens up to each sample's EOS count (HF's static batch keeps stepping finished rows until its
longest row ends; vLLM's continuous batching does not). Raw vLLM and the pool each run the same
generation once untimed (vLLM's CPU kernels warm up to the step's shapes: that first run is 20-35%
slower), then time it `repeats` times on the same engine and report the median, since one run on a
small machine varies by several percent."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.sampling import SamplingConfig


def kv_cache_bytes(model: Path, samples: int, tokens_per_sample: int) -> int:
    """The same KV cache size for raw vLLM and our pool: enough for all samples at full length."""
    import json

    from orchestrator.rollout.kv_cache import cpu_kv_cache_bytes

    return cpu_kv_cache_bytes(json.loads((model / "config.json").read_text()), samples, tokens_per_sample)


def _median(runs: list[tuple[int, float]]) -> dict:
    """(tokens, seconds) of each repetition -> the median one's figures, with every run's rate."""
    rates = [tokens / seconds for tokens, seconds in runs]
    tokens, seconds = runs[rates.index(statistics.median_low(rates))]
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "runs_tokens_per_s": rates}


def raw_vllm(
    model: Path, prompt_ids: list[list[int]], n: int, max_tokens: int, seed: int, ignore_eos: bool = True, repeats: int = 1
) -> dict:
    """vLLM's `LLM.generate` in this process, its threads on every core of the machine as a lone engine
    of our pool has them (rollout/cpu_cores.py), so the pool's figure against it is the pool's own cost."""
    import os

    from vllm import LLM

    from orchestrator.rollout.cpu_cores import core_slice
    from workers.rollout.sampling import vllm_params

    samples, tokens = len(prompt_ids) * n, max(map(len, prompt_ids)) + max_tokens
    before = os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = core_slice(sorted(os.sched_getaffinity(0)), engines=1, slot=0)
    llm = LLM(
        model=str(model),
        dtype="float32",
        enforce_eager=True,
        seed=seed,
        max_num_seqs=samples,
        kv_cache_memory_bytes=kv_cache_bytes(model, samples, tokens),
        logprobs_mode="processed_logprobs",
        disable_log_stats=True,
    )
    if before is None:  # read by vLLM's engine process as it started; the rest of the bench runs as before
        del os.environ["VLLM_CPU_OMP_THREADS_BIND"]
    else:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = before
    # The pool's own sampling parameters, group by group (the seed of group g is seed + g): both sides
    # then generate the same completions, so with samples ending at EOS they do the same work.
    sampling = SamplingConfig(max_tokens=max_tokens, ignore_eos=ignore_eos, temperature=1.0, seed=seed)
    params = [vllm_params(sampling, n, group_id) for group_id in range(len(prompt_ids))]
    prompts = [{"prompt_token_ids": ids} for ids in prompt_ids]
    llm.generate(prompts, params, use_tqdm=False)  # warm-up, untimed
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        runs.append((sum(len(c.token_ids) for o in outputs for c in o.outputs), seconds))
    del llm
    return _median(runs)


def pool(
    model: Path,
    tokenizer,
    prompts: list[str],
    prompt_ids,
    n: int,
    max_tokens: int,
    seed: int,
    engines: int,
    ignore_eos: bool = True,
    repeats: int = 1,
) -> dict:
    from orchestrator.launch import connect, rollout_cpus, start_pool
    from orchestrator.rollout.groups import make_groups

    sampling = SamplingConfig(max_tokens=max_tokens, ignore_eos=ignore_eos, temperature=1.0, seed=seed)
    requests = make_groups(prompts, prompt_ids, n, sampling)
    samples, tokens = len(prompt_ids) * n, max(map(len, prompt_ids)) + max_tokens
    config = RolloutConfig(
        engines=engines, kv_cache_memory_bytes=kv_cache_bytes(model, samples, tokens), max_inflight_samples=samples
    )
    started = start_pool(connect(rollout_cpus(config)), str(model), tokenizer, config, seed=seed)
    runs = []
    try:
        started.generate(requests)  # warm-up, untimed
        for _ in range(repeats):
            start = time.perf_counter()
            results = started.generate(requests)
            seconds = time.perf_counter() - start
            runs.append((sum(len(s.completion_ids) for r in results for s in r.samples), seconds))
    finally:
        started.shutdown()
    return _median(runs)


def hf_generate(
    model: Path, prompt_ids, n: int, max_tokens: int, seed: int, ignore_eos: bool = True, batch_prompts: int = 8
) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    eos = hf.config.eos_token_id
    tokens, start = 0, time.perf_counter()
    for first in range(0, len(prompt_ids), batch_prompts):
        chunk = prompt_ids[first : first + batch_prompts]
        width = max(len(ids) for ids in chunk)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.no_grad():
            out = hf.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                num_return_sequences=n,
                max_new_tokens=max_tokens,
                min_new_tokens=max_tokens if ignore_eos else 0,
                pad_token_id=eos,
                eos_token_id=eos,
                top_k=0,
            )
        tokens += (
            sum(_length(row, eos) for row in out[:, width:].tolist()) if not ignore_eos else (out.shape[1] - width) * out.shape[0]
        )
    seconds = time.perf_counter() - start
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def _length(completion: list[int], eos: int) -> int:
    """Tokens up to and including the first EOS (the rest of a static-batch row is padding)."""
    return completion.index(eos) + 1 if eos in completion else len(completion)
