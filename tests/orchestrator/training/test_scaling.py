"""During a run the rollout pool grows from 1 to 2 engines and shrinks back (`orchestrator scale`):
the new engine's first samples carry the current policy version (it passed the fingerprint check
and was synced before serving), and no group is lost while an engine drains."""

import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

# Slow (a whole `train` run on this 2-core machine); in the default suite training/test_autoscale_run.py covers a pool resized (shrunk) between steps of a run.
pytestmark = [pytest.mark.engines, pytest.mark.slow]

PER_STEP = 16


def _wait(condition, what: str, proc, timeout=600):
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the run ended while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _steps(run):
    """{step: [engine ids of its samples]} from the rollout files written so far."""
    out = {}
    for path in sorted((run / "rollouts").glob("step-*.parquet")):
        out[int(path.stem.removeprefix("step-"))] = pq.read_table(path, columns=["engine_id"]).column(0).to_pylist()
    return out


def _scale(run, engines: int) -> None:
    subprocess.run([sys.executable, "-m", "orchestrator", "scale", str(run), "--engines", str(engines)], check=True, timeout=60)


def test_grow_to_two_engines_and_shrink_back_during_a_run(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "train",
            "rollout.engines=1",
            "max_steps=2000",
            "prompts_per_step=4",
            "num_generations=4",
            "max_completion_length=16",
            "plot_steps=100000",
            f"output_dir={run}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(lambda: len(_steps(run)) >= 2, "step 2", proc)
        _scale(run, 2)
        _wait(lambda: any(1 in engines for engines in _steps(run).values()), "the new engine's first samples", proc)
        grown = min(step for step, engines in _steps(run).items() if 1 in engines)
        _scale(run, 1)
        _wait(lambda: sum(set(e) == {0} for s, e in _steps(run).items() if s > grown + 1) >= 3, "3 steps after the shrink", proc)
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "scaling the rollout pool to 2 engine(s)" in out and "draining engine(s) [1]" in out

    table = pq.read_table(run / "rollouts")
    steps = sorted(set(table.column("step").to_pylist()))
    assert table.num_rows == len(steps) * PER_STEP
    keys = list(zip(*(table.column(c).to_pylist() for c in ("step", "group_id", "sample_index"))))
    assert len(set(keys)) == len(keys)
    rows = table.to_pylist()
    first_of_new = [r for r in rows if r["engine_id"] == 1 and r["step"] == grown]
    assert first_of_new and all(r["policy_version"] == grown - 1 for r in first_of_new)
    last = max(steps)
    assert {r["engine_id"] for r in rows if r["step"] > last - 3} == {0}
