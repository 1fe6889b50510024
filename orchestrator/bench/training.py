"""Training throughput: our `train` loop vs TRL's GRPOTrainer alone (HF generate, no vLLM), on the
same model, prompts, reward, batch and lengths (weight sync against a memory copy: weight_sync.py)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

PHASES = ("time/generate", "time/reward", "time/train", "time/sync")
LEARNER_FIGURES = ("time/learner_step", "learner/pad_fraction", "learner/micro_batches", "learner/tokens_per_s")
# Averaged over the steady steps that log them (async runs, the engine correction)
OPTIONAL_FIGURES = ("staleness/token_mean", "sampling/sampling_logp_difference/mean", "weight_sync/density")
# The learner without token budgets and packing: the whole step in one padded pass.
PADDED_LEARNER = {"max_tokens_per_micro_batch": None, "padding_free": False}
# Async mode: the next step's batch generates while this one trains, clipped against the engines'
# log-probs (the correction, on by default, stays on).
ASYNC = {"max_staleness": 1}


def ours(
    model: Path,
    steps: int,
    prompts_per_step: int,
    n: int,
    max_tokens: int,
    seed: int,
    out_dir: Path,
    ignore_eos: bool = True,
    learner: dict | None = None,
    rollout: dict | None = None,
    settings: dict | None = None,
) -> dict:
    """Our `train` loop's figures (`_figures`); `learner` and `rollout` override those sections (e.g.
    PADDED_LEARNER), `settings` top-level keys (e.g. ASYNC)."""
    from orchestrator.builtin import search_task
    from orchestrator.config.train import TrainConfig
    from orchestrator.launch import canonical_tokenizer, start_training
    from orchestrator.training.loop import GRPORun
    from orchestrator.training.requests import PromptSet, tokenize_prompts
    from orchestrator.training.run_dir import RunDir

    config = TrainConfig(
        **{
            "model": str(model),
            "tokenizer": str(model),
            "prompts_per_step": prompts_per_step,
            "num_generations": n,
            "max_completion_length": max_tokens,
            "ignore_eos": ignore_eos,
            "max_steps": steps,
            "learning_rate": 1e-5,
            "seed": seed,
            "output_dir": str(out_dir),
            "plot_steps": 10**6,
            "reward_funcs": ["builtin:search_call"],
            "learner": learner or {},
            "rollout": rollout or {},
            **(settings or {}),
        }
    )
    tokenizer, prompts = canonical_tokenizer(config, str(model)), search_task.all_prompts()
    # The engines' context is the longest prompt plus the completion budget, as `train` sizes it: without
    # the prompt, every completion would end that many tokens short of max_tokens.
    longest = max(len(ids) for ids in tokenize_prompts(prompts, tokenizer))
    parts = start_training(config, str(model), tokenizer, max_prompt_tokens=longest)
    try:
        run_dir = RunDir.create(config.output_dir)
        run_dir.prepare(config.model_dump(mode="json"))
        metrics = GRPORun(config, PromptSet.of_texts(prompts, tokenizer), run_dir, parts).run()
    finally:
        parts.shutdown()
    return _figures(metrics)


def _figures(metrics: list[dict]) -> dict:
    """A run's throughput, phases and learner figures over its steady steps (step 1 pays for
    first-request set-up), and the busy share of their wall time of the engines (`busy/engines`) and of
    the learner (`busy/learner`): above 1 together, they overlapped."""
    steady = metrics[1:]
    step_time = float(np.mean([m["time/step"] for m in steady]))
    phases = {p: float(np.mean([m[p] for m in steady])) for p in PHASES}
    learner_figures = {p: float(np.mean([m[p] for m in steady])) for p in LEARNER_FIGURES}
    wall = sum(m["time/step"] for m in steady)
    return {
        "samples_per_s": float(np.mean([m["samples"] / m["time/step"] for m in steady])),
        "step_s": step_time,
        **phases,
        **learner_figures,
        "overhead_share": max(0.0, 1.0 - sum(phases.values()) / step_time),
        "busy/engines": sum(m["time/pool_busy"] for m in steady) / wall,
        "busy/learner": sum(m["time/learner_step"] for m in steady) / wall,
        "sync_bytes": int(steady[-1]["weight_sync/bytes"]),
        "sync_bytes_mean": float(np.mean([m["weight_sync/bytes"] for m in steady])),  # patches vary by step
        "sync_model_bytes": int(steady[-1].get("weight_sync/model_bytes", steady[-1]["weight_sync/bytes"])),
        "sync_s": phases["time/sync"],
        "reward_last": float(metrics[-1]["reward_mean"]),
        **{name: float(np.mean([m[name] for m in steady if name in m])) for name in OPTIONAL_FIGURES if name in steady[-1]},
    }


def trl(
    model: Path, steps: int, prompts_per_step: int, n: int, max_tokens: int, seed: int, out_dir: Path, ignore_eos: bool = True
) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from orchestrator.builtin import search_task

    class StepClock(TrainerCallback):
        def __init__(self):
            self.times = []

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter())

    args = GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=prompts_per_step * n,
        num_generations=n,
        max_completion_length=max_tokens,
        max_steps=steps,
        learning_rate=1e-5,
        seed=seed,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        generation_kwargs={"min_new_tokens": max_tokens} if ignore_eos else {},
    )
    clock = StepClock()
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model),
        reward_funcs=search_task.search_call_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": search_task.all_prompts()}),
        processing_class=AutoTokenizer.from_pretrained(model),
        callbacks=[clock],
    )
    trainer.train()
    step_times = np.diff(clock.times)  # from the end of step 1: steady state
    rewards = [e["reward"] for e in trainer.state.log_history if "reward" in e]
    return {
        "samples_per_s": float(prompts_per_step * n / step_times.mean()),
        "step_s": float(step_times.mean()),
        "reward_last": float(rewards[-1]),
    }
