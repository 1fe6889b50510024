"""Trackers get every metrics line under the metrics.jsonl names; TensorBoard's reader reads them."""

import logging

import pytest

from orchestrator.contracts.errors import UserError
from orchestrator.training.trackers import TENSORBOARD_DIR, Tracker, Trackers, check_available, make_trackers


def test_tensorboard_events_hold_the_metrics(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trackers = make_trackers(["tensorboard"], tmp_path, {})
    for step in (1, 2):
        trackers.log({"step": step, "reward_mean": 0.25 * step, "eval/pass@4": 0.5, "weight_sync/checksum": "ab12"})
    trackers.close()
    events = EventAccumulator(str(tmp_path / TENSORBOARD_DIR))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"reward_mean", "eval/pass@4"}  # strings are left out
    assert [(e.step, e.value) for e in events.Scalars("reward_mean")] == [(1, 0.25), (2, 0.5)]


def test_a_missing_tracker_package_is_named(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(UserError, match=r"report_to: 'wandb' needs the wandb package, which is not installed"):
        check_available(["tensorboard", "wandb"])


def test_wandb_offline_writes_its_run_in_the_run_folder(tmp_path, monkeypatch):
    pytest.importorskip("wandb")  # optional: not part of the install
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    trackers = make_trackers(["wandb"], tmp_path, {"learning_rate": 5e-4})
    trackers.log({"step": 1, "reward_mean": 0.5, "eval/reward_mean": 0.25})
    trackers.close()
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))


def test_steps_that_run_again_show_once_in_tensorboard_with_their_new_values(tmp_path):
    """A learner restart from the step-2 checkpoint, then a `--resume` from step 3: TensorBoard shows
    each step once, as metrics.jsonl has it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trackers = make_trackers(["tensorboard"], tmp_path, {})
    for step in (1, 2, 3, 4):
        trackers.log({"step": step, "reward_mean": step})
    trackers.rewind(2)  # the learner restarted from step 2's checkpoint
    trackers.log({"step": 3, "reward_mean": 30})
    trackers.close()
    resumed = make_trackers(["tensorboard"], tmp_path, {}, after_step=3)  # --resume from step 3
    resumed.log({"step": 4, "reward_mean": 40})
    resumed.close()
    events = EventAccumulator(str(tmp_path / TENSORBOARD_DIR))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward_mean")] == [(1, 1), (2, 2), (3, 30), (4, 40)]


@pytest.fixture
def mlflow_env(monkeypatch):
    """No MLflow settings from the machine; MLFLOW_ALLOW_FILE_STORE, which the tracker sets, is restored after."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "")


def test_mlflow_keeps_every_step_and_the_config_in_the_run_folder(tmp_path, mlflow_env):
    """A learner restart from the step-2 checkpoint: step 3 has both values, the redone one last, and
    `rewind` marks where the run went back to."""
    from mlflow.tracking import MlflowClient

    config = {
        "learning_rate": 5e-4,
        "rollout": {"engines": 2},
        "stop": ["</a>"],
        "eval_temperature": None,
        "chat_template": "x" * 7000,
    }
    trackers = make_trackers(["mlflow"], tmp_path, config)
    for step in (1, 2, 3):
        trackers.log({"step": step, "reward_mean": step, "eval/pass@4": 0.5, "weight_sync/checksum": "ab12"})
    trackers.rewind(2)
    trackers.log({"step": 3, "reward_mean": 30, "eval/pass@4": 0.75})
    trackers.close()

    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    [run] = client.search_runs([client.get_experiment_by_name("grpo-orchestrator").experiment_id])
    assert (run.info.run_name, run.info.status) == (tmp_path.name, "FINISHED")
    assert set(run.data.metrics) == {"reward_mean", "eval/pass_4", "rewind"}  # strings are left out

    def history(name):
        return [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, name)]

    assert history("reward_mean") == [(1, 1), (2, 2), (3, 3), (3, 30)]
    assert history("eval/pass_4") == [(1, 0.5), (2, 0.5), (3, 0.5), (3, 0.75)]
    assert history("rewind") == [(2, 2)]
    params = run.data.params
    assert {key: params[key] for key in ("learning_rate", "rollout.engines", "stop", "eval_temperature")} == {
        "learning_rate": "0.0005",
        "rollout.engines": "2",
        "stop": '["</a>"]',
        "eval_temperature": "null",
    }
    assert params["chat_template"] == "x" * 6000  # MLflow's longest parameter value


def test_mlflow_takes_its_store_and_experiment_from_the_environment(tmp_path, mlflow_env, monkeypatch):
    from mlflow.tracking import MlflowClient

    store = (tmp_path / "shared-store").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a file store the user chose: MLflow's own opt-in
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "sweep")
    trackers = make_trackers(["mlflow"], tmp_path / "run-a", {})
    trackers.log({"step": 1, "reward_mean": 0.5})
    trackers.close()
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("sweep").experiment_id])
    assert (run.info.run_name, run.data.metrics) == ("run-a", {"reward_mean": 0.5})
    assert not (tmp_path / "run-a" / "mlruns").exists()


def test_report_to_mlflow_is_accepted_and_a_missing_package_names_the_pip_command(tmp_path, monkeypatch):
    import importlib.util

    from orchestrator.config.loading import load_config
    from orchestrator.config.train import TrainConfig

    path = tmp_path / "run.yaml"
    path.write_text("report_to: [tensorboard, mlflow]\n")
    assert load_config(TrainConfig, path, []).report_to == ["tensorboard", "mlflow"]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(UserError) as error:
        check_available(["tensorboard", "mlflow"])
    assert str(error.value) == (
        "report_to: 'mlflow' needs the mlflow package, which is not installed "
        "(pip install mlflow-skinny, or remove it from report_to)"
    )


class _Failing(Tracker):
    """Raises on log for its first `failures` calls (forever when None), and on close."""

    def __init__(self, failures=None):
        self.failures, self.logged, self.closed = failures, [], 0

    def log(self, metrics, step):
        if self.failures is None or self.failures > 0:
            self.failures = None if self.failures is None else self.failures - 1
            raise ConnectionError("tracking server unreachable")
        self.logged.append(step)

    def rewind(self, step):
        pass

    def close(self):
        self.closed += 1
        raise ConnectionError("tracking server unreachable")


class _Recording(Tracker):
    def __init__(self):
        self.logged, self.closed = [], 0

    def log(self, metrics, step):
        self.logged.append(step)

    def rewind(self, step):
        pass

    def close(self):
        self.closed += 1


def test_a_failing_tracker_never_stops_the_run_nor_the_other_trackers(caplog):
    broken, flaky, healthy = _Failing(), _Failing(failures=2), _Recording()
    trackers = Trackers([broken, flaky, healthy])
    with caplog.at_level(logging.WARNING, logger="orchestrator"):
        for step in range(1, 6):
            trackers.log({"step": step, "reward_mean": 0.5})
        trackers.close()
    assert healthy.logged == [1, 2, 3, 4, 5] and healthy.closed == 1
    assert flaky.logged == [3, 4, 5]  # two failures in a row, then logging again
    assert broken not in trackers.trackers and broken.closed == 1  # left out after MAX_FAILURES in a row
    warnings = [record.getMessage() for record in caplog.records]
    assert (
        sum(
            "_Failing failed to log step 1 (ConnectionError: tracking server unreachable); training goes on" in w
            for w in warnings
        )
        == 2
    )
    assert sum("failed 3 times in a row; no longer logging to it" in w for w in warnings) == 1
    assert any("_Failing failed to close: ConnectionError" in w for w in warnings)  # the flaky one, at the end
