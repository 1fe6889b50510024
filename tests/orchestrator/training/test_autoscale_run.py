"""`train` with `rollout.autoscale` (real Ray, vLLM, TRL): the pool resizes itself through its front
door between steps, the decision and its reason are in the metrics and on the step line, and every
group of every step is trained on exactly once across the resize."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.engines


def _train(run, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", f"output_dir={run}", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _all_groups_once(run, steps: int) -> None:
    table = pq.read_table(run / "rollouts")
    keys = list(zip(*(table.column(c).to_pylist() for c in ("step", "group_id", "sample_index"))))
    assert len(keys) == steps * 64 and len(set(keys)) == len(keys)


@pytest.mark.slow  # the policy is rollout/test_autoscale.py's, a resize mid-run rollout/test_fleet.py's
def test_a_pool_that_generation_keeps_ahead_shrinks_to_min_engines(tmp_path):
    run = tmp_path / "run"
    policy = "{min_engines: 1, max_engines: 2, grow_above: 1.0, shrink_below: 0.95, window_steps: 1, cooldown_steps: 0}"
    proc = _train(run, "max_steps=6", "rollout.engines=2", f"rollout.autoscale={policy}")
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["autoscale/decision"] for m in metrics][:2] == [0, -1]  # the first step is not measured
    assert metrics[0]["autoscale/reason"] == "first step: not measured"
    assert "below shrink_below=0.95" in metrics[1]["autoscale/reason"]
    assert metrics[0]["rollout/engines"] == 2 and metrics[-1]["rollout/engines"] == 1
    assert all(m["autoscale/target"] == 1 for m in metrics[1:])
    assert "engines -> 1: the learner waited" in proc.stderr + proc.stdout
    _all_groups_once(run, 6)


@pytest.mark.slow
def test_a_pool_the_learner_waits_for_grows_and_keeps_only_a_growth_that_pays(tmp_path):
    """Slow (about 2 minutes): the second engine takes tens of seconds to start. On a 2-core machine it
    shares the cores with the first and the learner, so the growth usually does not pay and is undone."""
    run = tmp_path / "run"
    policy = "{min_engines: 1, max_engines: 2, window_steps: 2, cooldown_steps: 1}"
    _train(run, "max_steps=30", "max_completion_length=128", "ignore_eos=true", f"rollout.autoscale={policy}")
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    grew = [m["step"] for m in metrics if m["autoscale/decision"] == 1]
    assert grew, [m["autoscale/reason"] for m in metrics]
    waiting = [m for m in metrics if m["step"] > grew[0] and m["rollout/engines_pending"] == 1]
    assert waiting and all("waiting for 1 engine(s) to start" in m["autoscale/reason"] for m in waiting[1:])
    assert max(m["rollout/engines"] for m in metrics) == 2  # it served
    for m in metrics:
        if m["autoscale/decision"] == -1:
            assert "raised throughput" in m["autoscale/reason"] and "back to 1" in m["autoscale/reason"]
    _all_groups_once(run, 30)
