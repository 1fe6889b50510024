"""Trackers get every metrics line under the metrics.jsonl names; TensorBoard's reader reads them."""

import pytest

from orchestrator.contracts.errors import UserError
from orchestrator.training.trackers import TENSORBOARD_DIR, check_available, make_trackers


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
