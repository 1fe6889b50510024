"""The learner killed mid-run (SIGKILL, as the kernel's OOM killer does it): by default it is
restarted from the last checkpoint and the run ends as an uninterrupted one would, every step
recorded once; with `learner.max_restarts=0` the run stops at once with one line saying why and
the exact `--resume` command, its last checkpoint whole (test_resume.py: `--resume` continues exactly)."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from orchestrator.training.run_dir import RunDir
from tests.orchestrator.training.short_run import ARGS, STEPS, metrics

pytestmark = pytest.mark.engines


def _learner(driver: subprocess.Popen) -> psutil.Process:
    for process in psutil.Process(driver.pid).children(recursive=True):
        try:
            if process.cmdline() and process.cmdline()[0].startswith("ray::Learner"):
                return process
        except psutil.Error:
            continue
    raise AssertionError("no learner process under the driver")


def _kill_learner_after(run, step: int, *extra: str) -> subprocess.Popen:
    """Start `train`, and SIGKILL its learner once `step` is recorded (after the step-2 checkpoint)."""
    driver = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "train", *ARGS, "save_steps=2", f"output_dir={run}", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 400
    while not ((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text().count("\n") >= step):
        assert driver.poll() is None and time.monotonic() < deadline, "run ended or stalled before the kill"
        time.sleep(0.05)
    os.kill(_learner(driver).pid, signal.SIGKILL)
    return driver


@pytest.mark.slow  # two runs; in the default suite training/test_learner_restart.py runs the loop's restart code
def test_a_killed_learner_is_restarted_from_the_last_checkpoint(tmp_path, uninterrupted_rewards):
    run = tmp_path / "run"
    driver = _kill_learner_after(run, 3)
    out, err = driver.communicate(timeout=600)
    assert driver.returncode == 0, err[-3000:]
    assert "the learner died" in err and "restarting it from step-000002" in err, err[-3000:]
    assert "not out of memory" in err  # it was a plain SIGKILL, and the node's counters say so
    recorded = metrics(run)
    assert [m["step"] for m in recorded] == list(range(1, STEPS + 1))  # step 3 was run again, recorded once
    assert [m["reward_mean"] for m in recorded] == pytest.approx(uninterrupted_rewards, abs=1e-6)
    assert (
        max(m["sampling/sampling_logp_difference/mean"] for m in recorded) < 0.01
    )  # engines hold the restarted learner's weights
    assert sorted(p.name for p in (run / "rollouts").iterdir()) == [f"step-{s:06d}.parquet" for s in range(1, STEPS + 1)]


@pytest.mark.slow  # 80 s; the resume command a stopped run prints is also checked by test_resume.py
def test_without_restarts_the_run_stops_with_the_resume_command(tmp_path):
    run = tmp_path / "run"
    driver = _kill_learner_after(run, 3, "learner.max_restarts=0")
    killed = time.monotonic()
    out, err = driver.communicate(timeout=300)  # never a hang
    stopped_in = time.monotonic() - killed
    assert driver.returncode == 1, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the learner died" in errors[0], err[-3000:]
    assert "Traceback" not in err
    command = f"continue with: python -m orchestrator train --resume {run}"
    assert errors[0].endswith(command)
    checkpoint, state = RunDir(run).latest_checkpoint()  # whole, not damaged
    assert checkpoint.name == "step-000002" and state.step == 2
    print(f"stopped {stopped_in:.1f} s after the kill")  # -s shows it
