"""Ctrl-C stops a run cleanly with a checkpoint; `train --resume` continues it exactly: on CPU with a
fixed seed the per-step rewards equal those of an uninterrupted run."""

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.orchestrator.training.short_run import STEPS, start_until

pytestmark = pytest.mark.engines


def _train(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _rewards(run_dir):
    return [json.loads(line)["reward_mean"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _engine_processes(driver: subprocess.Popen) -> list[psutil.Process]:
    """The driver's vLLM engine processes (other runs on the machine have their own)."""
    found = []
    for process in psutil.Process(driver.pid).children(recursive=True):
        try:
            if "EngineCore" in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:  # exited meanwhile
            continue
    return found


def _stop_after_two_steps(run, stop) -> int:
    """Start the short run, send `stop` once step 2 is written, check the stop was clean and return the
    steps it recorded."""
    proc = start_until(run, 2, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    engines = _engine_processes(proc)
    assert engines
    proc.send_signal(stop)
    stopped = time.monotonic()
    out, err = proc.communicate(timeout=300)
    assert time.monotonic() - stopped < 60
    assert proc.returncode == (0 if stop == signal.SIGINT else 143), err[-3000:]
    assert f"continue with: python -m orchestrator train --resume {run}" in out + err
    assert "Aborted" not in out + err and "*** " not in out + err, "a native stack dump"
    stopped_at = len(_rewards(run))
    assert 2 <= stopped_at < STEPS
    assert (run / "checkpoints" / f"step-{stopped_at:06d}" / "learner_state.pt").is_file()
    _, alive = psutil.wait_procs(engines, timeout=10)
    assert not alive, "the interrupted run left vLLM engine processes behind"
    return stopped_at


@pytest.mark.slow  # the SIGTERM test below takes the same clean stop, and resumes
def test_ctrl_c_stops_the_run_cleanly_with_a_checkpoint(tmp_path):
    _stop_after_two_steps(tmp_path / "interrupted", signal.SIGINT)


def test_a_run_stopped_by_sigterm_resumes_to_match_an_uninterrupted_one(tmp_path, uninterrupted_rewards):
    """SIGTERM is what Kubernetes sends a RayJob's driver: the same clean stop as Ctrl-C, but the exit
    status says the run did not finish. The resume is the same after either."""
    run = tmp_path / "interrupted"
    stopped_at = _stop_after_two_steps(run, signal.SIGTERM)
    resumed = _train("--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"from step-{stopped_at:06d}" in resumed.stdout
    assert _rewards(run) == pytest.approx(uninterrupted_rewards, abs=1e-6)
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))
