"""What the engine correction costs the learner (`python -m orchestrator bench --only correction`).

The learner alone (`GRPOLearner`: TRL's loss, AdamW) on a synthetic step of the bench prompts with
completions of realistic lengths (learner_memory.py's batch), three ways: without the correction;
with it as it runs by default (one update per step: the old log-probs are those of the loss's own
forward pass, so the correction adds no pass); and with two updates per step (`num_iterations: 2`),
where a no-grad pass computes the old log-probs first, which is the pass TRL runs for every
generation batch when it corrects vLLM's samples. Each way runs `steps` steps after one to warm up;
the figures are means.
"""

from __future__ import annotations

import time
from pathlib import Path

WAYS = {
    "correction off": {"vllm_importance_sampling_correction": False},
    "correction on (default: from the loss's own pass)": {},
    "correction on, num_iterations 2 (an old log-probs pass first)": {"num_iterations": 2},
}


def measure(model: Path, samples: int, mean_length: int, max_length: int, steps: int = 3) -> dict:
    from orchestrator.bench import learner_memory
    from orchestrator.config.train import TrainConfig
    from workers.learner.grpo import GRPOLearner

    rows = []
    for way, settings in WAYS.items():
        config = TrainConfig(
            model=str(model),
            prompts_per_step=samples // learner_memory.GENERATIONS,
            num_generations=learner_memory.GENERATIONS,
            max_completion_length=max_length,
            learning_rate=1e-5,
            max_steps=steps + 1,
            learner={"num_gpus": 0},
            **settings,
        )
        learner = GRPOLearner(config, str(model), str(model))
        batch = learner_memory.step_batch(learner, samples, mean_length, max_length)
        learner.train_step(batch)  # warm-up: AdamW's state, first allocations
        figures = []
        for _ in range(steps):
            start = time.perf_counter()
            metrics = learner.train_step(batch)
            figures.append((time.perf_counter() - start, metrics.get("time/old_logps", 0.0)))
        step_s = sum(step for step, _ in figures) / steps
        old_s = sum(old for _, old in figures) / steps
        rows.append(
            {"way": way, "step_s": step_s, "old_logps_s": old_s, "per_update_s": (step_s - old_s) / config.num_iterations}
        )
        print(f"correction: {way}: {step_s:.2f} s/step, old log-probs pass {old_s:.2f} s", flush=True)
    return {"model": str(model), "samples": samples, "rows": rows}


def table(result: dict) -> str:
    base = result["rows"][0]["step_s"]
    lines = [
        "| learner | s/step | old log-probs pass | s per update | vs correction off |",
        "|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['way']} | {row['step_s']:.2f} | {row['old_logps_s']:.2f} s | {row['per_update_s']:.2f} | "
            f"{row['step_s'] / base:.2f}x |"
        )
    return "\n".join(lines)
