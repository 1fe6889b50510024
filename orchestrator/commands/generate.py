"""`python -m orchestrator generate`: prompts in, a Parquet rollout table out.

Everything that can be checked is checked before Ray starts: the output path, the prompt file, the
model folder (config and weight file headers) and tokenizer, the stop token ids. The table is
written atomically at the end.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from orchestrator.contracts.errors import UserError
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.sampling import SamplingConfig

BUILTIN_PROMPTS = 32


def run_generate(args: argparse.Namespace) -> int:
    sampling, rollout = _settings(args)
    if args.num_generations < 1:
        raise UserError(f"--num-generations must be at least 1, got {args.num_generations}")
    out = Path(args.out)
    if out.suffix != ".parquet":
        raise UserError(f"--out {out}: expected a .parquet file")
    from orchestrator.output_paths import check_creatable

    check_creatable(out, "--out", folder=False)
    prompts = _prompts(args.prompts)

    from orchestrator.contracts.tokenizer import load_tokenizer
    from orchestrator.launch import connect, rollout_cpus, start_pool
    from orchestrator.models import check_prompt_fits, check_token_ids, context_limit, resolve_model
    from orchestrator.rollout.groups import make_groups
    from orchestrator.rollout.parquet import rollout_table, write_parquet
    from orchestrator.rollout.samples import StepSamples

    model, tokenizer_name = resolve_model(args.model, args.tokenizer, keys=("--model", "--tokenizer"))
    tokenizer = load_tokenizer(tokenizer_name)
    check_token_ids(sampling.stop_token_ids, tokenizer, "--stop-token-ids")
    prompt_ids = [tokenizer(prompt)["input_ids"] for prompt in prompts]
    limit = context_limit(model, rollout.max_model_len)
    check_prompt_fits([len(ids) for ids in prompt_ids], sampling.max_tokens, limit, args.prompts or "built-in prompts")
    requests = make_groups(prompts, prompt_ids, args.num_generations, sampling)

    config_file = Path(model) / "config.json"
    sized_for = None
    if config_file.is_file():
        longest = max(len(ids) for ids in prompt_ids)
        sized_for = (json.loads(config_file.read_text()), len(requests) * args.num_generations, longest + sampling.max_tokens)
    pool = start_pool(connect(rollout_cpus(rollout)), model, tokenizer, rollout, seed=args.seed or 0, sized_for=sized_for)
    try:
        results, seconds = _generate_with_progress(pool, requests)
    finally:
        pool.shutdown()
    samples = StepSamples.assemble(requests, results)
    write_parquet(rollout_table(samples), out)
    tokens = int(samples.completion_ids.lengths.sum())
    print(
        f"generated {len(samples)} samples ({len(requests)} prompts x {args.num_generations}) on {rollout.engines} "
        f"engine(s): {tokens} completion tokens in {seconds:.1f}s = {tokens / seconds:.0f} tokens/s -> {out}"
    )
    return 0


def _settings(args: argparse.Namespace) -> tuple[SamplingConfig, RolloutConfig]:
    """The sampling and pool settings the flags give; a bad value is named as its flag's key."""
    from pydantic import ValidationError

    from orchestrator.config.base import explain

    try:
        sampling = SamplingConfig(
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
            stop=args.stop,
            stop_token_ids=args.stop_token_ids,
            include_stop_str_in_output=args.include_stop_str_in_output,
            ignore_eos=args.ignore_eos,
            skip_special_tokens=args.skip_special_tokens,
        )
        return sampling, RolloutConfig(engines=args.engines)
    except ValidationError as error:
        raise explain(error, SamplingConfig) from None


def _prompts(path: str | None) -> list[str]:
    if path is None:
        from orchestrator.builtin import search_task

        return search_task.prompts(BUILTIN_PROMPTS, seed=0)
    from orchestrator.data.prompts import read_prompts

    return read_prompts(path)


def _generate_with_progress(pool, requests):
    from tqdm import tqdm

    total = sum(request.num_generations for request in requests)
    tokens = 0
    start = time.perf_counter()
    with tqdm(total=total, unit="sample", desc="generate", dynamic_ncols=True) as bar:

        def on_result(result) -> None:
            nonlocal tokens
            tokens += sum(len(sample.completion_ids) for sample in result.samples)
            bar.update(len(result.samples))
            bar.set_postfix_str(f"{tokens / (time.perf_counter() - start):.0f} tok/s")

        results = pool.generate(requests, on_result=on_result)
    return results, time.perf_counter() - start
