"""PNG plots of a run, redrawn from metrics.jsonl: reward per step (and the held-out eval reward
where the run evaluates) and time per phase."""

from __future__ import annotations

from pathlib import Path

PHASES = ("time/generate", "time/reward", "time/train", "time/sync")


def draw(metrics: list[dict], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    steps = [m["step"] for m in metrics]
    mean = [m["reward_mean"] for m in metrics]
    std = [m["reward_std"] for m in metrics]

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, mean, marker="o", label="reward (mean over samples)")
    ax.fill_between(steps, [a - b for a, b in zip(mean, std)], [a + b for a, b in zip(mean, std)], alpha=0.2, label="± std")
    evaluated = [m for m in metrics if "eval/reward_mean" in m]
    if evaluated:  # held-out prompts (training/evaluation.py)
        ax.plot(
            [m["step"] for m in evaluated], [m["eval/reward_mean"] for m in evaluated], marker="s", label="eval reward (held out)"
        )
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    reward_png = folder / "reward.png"
    fig.savefig(reward_png, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    bottom = [0.0] * len(steps)
    for phase in PHASES:
        values = [m.get(phase, 0.0) for m in metrics]
        ax.bar(steps, values, bottom=bottom, label=phase.removeprefix("time/"))
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.plot(steps, [m["time/step"] for m in metrics], color="black", marker=".", label="step total")
    ax.set_xlabel("step")
    ax.set_ylabel("seconds")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    timings_png = folder / "timings.png"
    fig.savefig(timings_png, dpi=110)
    plt.close(fig)
    return [reward_png, timings_png]
