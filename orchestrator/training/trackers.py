"""Experiment trackers: every metrics.jsonl line also goes to TensorBoard, Weights & Biases and/or
MLflow, under the same names (`reward_mean`, `time/generate`, `eval/reward_mean`, ...), at the step it
belongs to.

    report_to: [tensorboard]          # event files in RUN_DIR/tensorboard: tensorboard --logdir RUN_DIR
    report_to: [tensorboard, wandb]   # wandb is optional: pip install wandb; WANDB_MODE=offline needs no network
    report_to: [mlflow]               # optional: pip install mlflow-skinny; a store in RUN_DIR/mlruns by default

Only numbers are sent (a checksum string stays in metrics.jsonl). W&B takes its project from
WANDB_PROJECT (default "grpo-orchestrator"), MLflow its store from MLFLOW_TRACKING_URI and its
experiment from MLFLOW_EXPERIMENT_NAME (default "grpo-orchestrator"); both name the run after the run
folder and get the config as its parameters. MLflow refuses some characters in a name:
`eval/pass@4` goes to it as `eval/pass_4` (see MLflowTracker).

Steps after a checkpoint run again after a learner restart or a `--resume`. TensorBoard then hides
what it had of them (`purge_step`), so each step shows once, with the values metrics.jsonl keeps. W&B
takes only increasing steps: a new `--resume` is a new W&B run, and within one run it keeps the first
values of a step that ran again and drops the rest (metrics.jsonl has the redone ones). MLflow keeps
every value: a new `--resume` is a new MLflow run, and within one run a step that ran again has both
values, the redone one logged last.
"""

from __future__ import annotations

import abc
import importlib.util
import json
import math
import os
import re
import time
from pathlib import Path

from orchestrator.contracts.errors import UserError
from orchestrator.log import log

TENSORBOARD_DIR = "tensorboard"
MLFLOW_DIR = "mlruns"
MLFLOW_PARAM_LENGTH = 6000  # the longest parameter value MLflow stores (mlflow.utils.validation.MAX_PARAM_VAL_LENGTH)


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


class MLflowTracker(Tracker):
    """One MLflow run per start of the run (a `--resume` opens a new one), named after the run folder.

    Store: MLFLOW_TRACKING_URI as MLflow reads it (a server `http://...`, or `sqlite:///...` with the
    full `mlflow` package); unset, a file store in RUN_DIR/mlruns. MLflow allows a file store only with
    MLFLOW_ALLOW_FILE_STORE=true, which is set for this one unless the environment says otherwise; to
    browse it, the full package's `MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri
    RUN_DIR/mlruns`. Experiment: MLFLOW_EXPERIMENT_NAME, default "grpo-orchestrator".

    Parameters: the config, flattened (`rollout.engines`); a list or null as JSON; a value past
    MLflow's 6,000 characters is cut. Metric and parameter names: what MLflow refuses becomes `_`, as
    transformers' MLflowCallback does (`eval/pass@4` -> `eval/pass_4`), and so does a `.` or `..`
    between slashes, and `//` becomes `/` (MLflow stores a name as a file path).

    A step that ran again (learner restart) has two values in MLflow's history, in the order logged:
    the later one is what metrics.jsonl keeps. The `rewind` metric marks it: at the step the run went
    back to, with that step as value.
    """

    def __init__(self, run_root: Path, config: dict):
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            uri = (run_root / MLFLOW_DIR).absolute().as_uri()
            if not os.environ.get("MLFLOW_ALLOW_FILE_STORE"):
                os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        self._client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "grpo-orchestrator"
        experiment = self._client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else self._client.create_experiment(name)
        self._run_id = self._client.create_run(experiment_id, run_name=run_root.name).info.run_id
        self._log(params=[self._param(key, value) for key, value in _flatten(config).items()])

    def _log(self, metrics=(), params=()) -> None:
        self._client.log_batch(self._run_id, metrics=list(metrics), params=list(params))

    @staticmethod
    def _param(key: str, value):
        from mlflow.entities import Param

        text = value if isinstance(value, str) else json.dumps(value)
        return Param(_mlflow_name(key), text[:MLFLOW_PARAM_LENGTH])

    @staticmethod
    def _metric(name: str, value: float, step: int):
        from mlflow.entities import Metric

        return Metric(_mlflow_name(name), value, int(time.time() * 1000), step)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._log(metrics=[self._metric(name, value, step) for name, value in metrics.items()])

    def rewind(self, step: int) -> None:
        self._log(metrics=[self._metric("rewind", step, step)])

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


def _mlflow_name(name: str) -> str:
    """`name` as MLflow takes it (see MLflowTracker)."""
    parts = re.sub(r"[^0-9A-Za-z_\-. :/]", "_", name).split("/")
    return "/".join(part.replace(".", "_") if part in (".", "..") else part for part in parts if part)


def _flatten(config: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class Trackers:
    """The configured trackers as one; with none configured, logging does nothing. A tracker is a
    record of the run, never a reason to stop it: one whose `log` raises is warned about (once) and
    tried again next step, and left out after `MAX_FAILURES` failures in a row; one whose `close`
    raises is warned about while the others still close."""

    MAX_FAILURES = 3

    def __init__(self, trackers: list[Tracker]):
        self.trackers = trackers
        self._failures = {id(tracker): 0 for tracker in trackers}

    def log(self, metrics: dict) -> None:
        numbers = {
            name: float(value)
            for name, value in metrics.items()
            if name != "step" and isinstance(value, (int, float)) and math.isfinite(float(value))
        }
        step = int(metrics["step"])
        for tracker in list(self.trackers):
            self._guarded(tracker, f"log step {step}", tracker.log, numbers, step)

    def rewind(self, step: int) -> None:
        for tracker in list(self.trackers):
            self._guarded(tracker, f"rewind to step {step}", tracker.rewind, step)

    def close(self) -> None:
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception as error:
                log.warning(f"report_to: {type(tracker).__name__} failed to close: {type(error).__name__}: {error}")

    def _guarded(self, tracker: Tracker, what: str, method, *args) -> None:
        name = type(tracker).__name__
        try:
            method(*args)
        except Exception as error:
            self._failures[id(tracker)] += 1
            failures = self._failures[id(tracker)]
            if failures == 1:
                log.warning(f"report_to: {name} failed to {what} ({type(error).__name__}: {error}); training goes on")
            if failures >= self.MAX_FAILURES:
                log.warning(f"report_to: {name} failed {failures} times in a row; no longer logging to it in this run")
                self.trackers.remove(tracker)
                self._close_quietly(tracker)
        else:
            self._failures[id(tracker)] = 0

    @staticmethod
    def _close_quietly(tracker: Tracker) -> None:
        try:
            tracker.close()
        except Exception:  # already failing: its own warning said so
            pass


def check_available(report_to: list[str]) -> None:
    """Before Ray starts: every tracker named in report_to can be imported."""
    needs = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
    pip_names = {"mlflow": "mlflow-skinny"}  # the tracking client alone; the full `mlflow` package works too
    for name in report_to:
        if importlib.util.find_spec(needs[name]) is None:
            raise UserError(
                f"report_to: {name!r} needs the {needs[name]} package, which is not installed "
                f"(pip install {pip_names.get(name, needs[name])}, or remove it from report_to)"
            )


def make_trackers(report_to: list[str], run_root: Path, config: dict, after_step: int = 0) -> Trackers:
    """`after_step`: a resumed run goes on from the checkpoint of that step."""
    made = []
    for name in report_to:
        if name == "tensorboard":
            made.append(TensorBoardTracker(run_root, after_step))
        elif name == "wandb":
            made.append(WandbTracker(run_root, config))
        else:
            made.append(MLflowTracker(run_root, config))
    return Trackers(made)
