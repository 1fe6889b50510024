"""`python -m orchestrator train [--config FILE.yaml] [key=value ...]`: a GRPO run.

The config, the prompts, the reward functions, the model and tokenizer paths, the stop token ids
and prompt lengths are all checked before Ray starts; then the learner and the rollout pool start
and the step loop runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.errors import UserError

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "builtin" / "default_train.yaml"


def run_train(args: argparse.Namespace) -> int:
    from orchestrator.config.loading import load_config
    from orchestrator.config.train import TrainConfig

    config = load_config(TrainConfig, Path(args.config) if args.config else DEFAULT_CONFIG, args.overrides)
    prompts = _prompts(config)
    from orchestrator.training.rewards import resolve

    for spec in config.reward_funcs:
        resolve(spec)
    from orchestrator.models import check_token_ids, resolve_model
    from orchestrator.training.run_dir import RunDir
    from workers.learner.model_setup import load_tokenizer

    model, tokenizer_name = resolve_model(config.model, config.tokenizer)
    tokenizer = load_tokenizer(tokenizer_name, config.added_tokens, warn=False)  # the learner warns
    check_token_ids(config.stop_token_ids, tokenizer, "stop_token_ids")
    _check_prompt_lengths(prompts, tokenizer, config.max_prompt_length)
    run_dir = RunDir.create(config.output_dir)
    run_dir.prepare({**config.model_dump(mode="json"), "model": model, "tokenizer": tokenizer_name})
    print(f"run folder: {run_dir.root}", flush=True)

    from orchestrator.training.loop import GRPORun, start_components

    components = start_components(config, model, tokenizer_name)
    try:
        metrics = GRPORun(config, prompts, run_dir, components).run()
    finally:
        _stop(components)
    first, last = metrics[0], metrics[-1]
    print(
        f"done: {len(metrics)} steps, reward {first['reward_mean']:.3f} (step 1) -> {last['reward_mean']:.3f} "
        f"(step {last['step']}); metrics, rollouts, plots and checkpoints in {run_dir.root}"
    )
    return 0


def _prompts(config) -> list[str]:
    if config.prompts == "builtin:search":
        from orchestrator.builtin import search_task

        return search_task.all_prompts()
    from orchestrator.data.prompts import read_prompts

    return read_prompts(config.prompts)


def _check_prompt_lengths(prompts: list[str], tokenizer, limit: int | None) -> None:
    if limit is None:
        return
    for index, prompt in enumerate(prompts):
        length = len(tokenizer(prompt)["input_ids"])
        if length > limit:
            raise UserError(f"prompt {index} has {length} tokens, more than max_prompt_length={limit}")


def _stop(components) -> None:
    import ray

    components.pool.shutdown()
    ray.kill(components.learner)
