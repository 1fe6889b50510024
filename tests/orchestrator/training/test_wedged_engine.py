"""A run whose only engine wedges (its vLLM engine process SIGSTOPped: alive to the OS and to Ray, but
answering nothing) goes on with default settings: the health check finds it, the pool kills it and
its stopped process, and the replacement generates the same groups on the current weights, so the
rewards equal those of the uninterrupted run.

Marked slow (about 2.5 minutes on 2 cores): `make test PYTEST_ARGS="-m slow"` runs it."""

import signal
import subprocess
import time

import numpy as np
import psutil
import pyarrow.parquet as pq
import pytest

from tests.orchestrator.training.short_run import STEPS, metrics, start_until

pytestmark = [pytest.mark.engines, pytest.mark.slow]
STOP_AFTER = 2


def test_a_wedged_engine_is_replaced_within_two_minutes_and_the_run_is_unchanged(tmp_path, uninterrupted_rewards):
    run = tmp_path / "run"
    # Right after a step's line the next step starts generating: the stopped engine holds its groups.
    proc = start_until(run, STOP_AFTER, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cores = [p for p in psutil.Process(proc.pid).children(recursive=True) if "EngineCore" in " ".join(p.cmdline())]
    assert len(cores) == 1
    cores[0].send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    out, _ = proc.communicate(timeout=300)
    took = time.monotonic() - stopped_at
    print(f"the run finished {took:.0f}s after the hang")  # how long the run took after the hang: pytest -s prints it
    assert proc.returncode == 0, out[-3000:]
    assert took < 120, f"the run took {took:.0f}s after the hang"
    assert "engine 0 is wedged" in out
    assert not cores[0].is_running() or cores[0].status() == psutil.STATUS_ZOMBIE, "the stopped process outlived its engine"

    recorded = metrics(run)
    assert [m["step"] for m in recorded] == list(range(1, STEPS + 1)) and recorded[-1]["engine_restarts"] == 1
    assert [m["reward_mean"] for m in recorded] == pytest.approx(uninterrupted_rewards, abs=1e-6)
    table = pq.read_table(run / "rollouts")
    steps, versions = np.asarray(table.column("step")), np.asarray(table.column("policy_version"))
    assert (versions == steps - 1).all(), "an engine served other weights than the current policy"
    assert set(np.asarray(table.column("engine_id"))[steps > STOP_AFTER].tolist()) == {1}  # the replacement
