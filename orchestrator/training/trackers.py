"""Experiment trackers: every metrics.jsonl line also goes to TensorBoard and/or Weights & Biases,
under the same names (`reward_mean`, `time/generate`, `eval/reward_mean`, ...), at the step it
belongs to.

    report_to: [tensorboard]          # event files in RUN_DIR/tensorboard: tensorboard --logdir RUN_DIR
    report_to: [tensorboard, wandb]   # wandb is optional: pip install wandb; WANDB_MODE=offline needs no network

Only numbers are sent (a checksum string stays in metrics.jsonl). W&B takes its project from
WANDB_PROJECT (default "grpo-orchestrator") and names the run after the run folder.

Steps after a checkpoint run again after a learner restart or a `--resume`. TensorBoard then hides
what it had of them (`purge_step`), so each step shows once, with the values metrics.jsonl keeps. W&B
takes only increasing steps: a new `--resume` is a new W&B run, and within one run it keeps the first
values of a step that ran again and drops the rest (metrics.jsonl has the redone ones).
"""

from __future__ import annotations

import abc
import importlib.util
import math
import os
from pathlib import Path

from orchestrator.contracts.errors import UserError

TENSORBOARD_DIR = "tensorboard"


class Tracker(abc.ABC):
    @abc.abstractmethod
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def rewind(self, step: int) -> None:
        """The steps after `step` run again: what was logged of them is to be replaced (see above)."""


class TensorBoardTracker(Tracker):
    def __init__(self, run_root: Path, after_step: int = 0):
        """`after_step`: the run goes on from the checkpoint of that step (0: from the start)."""
        self._folder = str(run_root / TENSORBOARD_DIR)
        self._writer = self._open(after_step)

    def _open(self, after_step: int):
        from torch.utils.tensorboard import SummaryWriter

        # TensorBoard hides events of this step and later that earlier event files hold (none in a new run).
        return SummaryWriter(log_dir=self._folder, purge_step=after_step + 1)

    def rewind(self, step: int) -> None:
        self._writer.close()
        self._writer = self._open(step)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, global_step=step)
        self._writer.flush()  # a crash loses nothing already in metrics.jsonl

    def close(self) -> None:
        self._writer.close()


class WandbTracker(Tracker):
    def __init__(self, run_root: Path, config: dict):
        import wandb

        self._wandb = wandb
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "grpo-orchestrator"),
            name=run_root.name,
            dir=str(run_root),
            config=config,
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def rewind(self, step: int) -> None:
        pass  # W&B keeps the first values of a step logged twice (see above)

    def close(self) -> None:
        self._run.finish()


class Trackers:
    """The configured trackers as one; with none configured, logging does nothing."""

    def __init__(self, trackers: list[Tracker]):
        self.trackers = trackers

    def log(self, metrics: dict) -> None:
        numbers = {
            name: float(value)
            for name, value in metrics.items()
            if name != "step" and isinstance(value, (int, float)) and math.isfinite(float(value))
        }
        for tracker in self.trackers:
            tracker.log(numbers, int(metrics["step"]))

    def rewind(self, step: int) -> None:
        for tracker in self.trackers:
            tracker.rewind(step)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


def check_available(report_to: list[str]) -> None:
    """Before Ray starts: every tracker named in report_to can be imported."""
    needs = {"tensorboard": "tensorboard", "wandb": "wandb"}
    for name in report_to:
        if importlib.util.find_spec(needs[name]) is None:
            raise UserError(
                f"report_to: {name!r} needs the {needs[name]} package, which is not installed "
                f"(pip install {needs[name]}, or remove it from report_to)"
            )


def make_trackers(report_to: list[str], run_root: Path, config: dict, after_step: int = 0) -> Trackers:
    """`after_step`: a resumed run goes on from the checkpoint of that step."""
    made = []
    for name in report_to:
        made.append(TensorBoardTracker(run_root, after_step) if name == "tensorboard" else WandbTracker(run_root, config))
    return Trackers(made)
