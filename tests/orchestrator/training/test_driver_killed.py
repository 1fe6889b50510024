"""A `train` driver killed with SIGKILL (no handler runs) takes its engines and learner with it,
leaves no half-written checkpoint or rollout file under a final name, and `--resume` continues
from the last complete checkpoint with every step recorded exactly once."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.engines, pytest.mark.slow]

STEPS = 4
ARGS = [
    "prompts_per_step=2",
    "num_generations=4",
    "max_completion_length=12",
    f"max_steps={STEPS}",
    "save_steps=1",
    "learning_rate=3e-3",
    "seed=5",
    "plot_steps=100",
]


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # it exited meanwhile
        return ""


def test_a_killed_driver_leaves_a_resumable_run_and_no_actors(tmp_path):
    run = tmp_path / "run"
    driver = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "train", *ARGS, f"output_dir={run}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 400
    while not (run / "checkpoints" / "step-000001").is_dir():
        assert driver.poll() is None and time.monotonic() < deadline, "run ended or stalled before its first checkpoint"
        time.sleep(0.05)
    started = psutil.Process(driver.pid).children(recursive=True)  # Ray's processes, learner, engines
    assert any("EngineCore" in _cmdline(p) for p in started)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)

    # Ray fate-shares the local cluster with the driver that started it: engines and learner go too
    workers = [
        p for p in started if any(name in _cmdline(p) for name in ("EngineCore", "ray::Learner", "ray::Rollout", "raylet"))
    ]
    _, alive = psutil.wait_procs(workers, timeout=60)
    assert not alive, f"engines or the learner outlived the killed driver: {[(p.pid, _cmdline(p)) for p in alive]}"

    for path in (run / "rollouts").glob("*.parquet"):  # final names hold whole files only
        pq.read_table(path)
    from orchestrator.training.run_dir import RunDir

    checkpoint, state = RunDir(run).latest_checkpoint()  # raises if the newest one is damaged
    resumed = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", "--resume", str(run)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"from {checkpoint.name} (step {state.step})" in resumed.stdout
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))
    assert sorted(p.name for p in (run / "rollouts").iterdir()) == [f"step-{s:06d}.parquet" for s in range(1, STEPS + 1)]
    assert not list(run.rglob("*.partial"))
    # Ray's helper processes (dashboard and runtime-env agents) notice their raylet is gone more slowly
    _, alive = psutil.wait_procs(started, timeout=60)
    assert not alive, f"processes outlived the killed driver: {[(p.pid, _cmdline(p)) for p in alive]}"
