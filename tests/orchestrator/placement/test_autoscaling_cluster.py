"""The rollout pool sized by the run itself, on Ray's own autoscaler (autoscaling_cluster.py: the head
node hosts the learner; a rollout node of one CPU is launched when an engine waits for one, and removed
once idle).

- A run whose learner waits for generation grows: its new engine waits as a pending placement group,
  Ray's autoscaler launches a rollout node for it, the engine serves, and the growth is kept if the
  pool's throughput rose by `min_gain`, else undone, and then the node it no longer uses is removed.
  Every node here shares this machine's two cores, so the growth is usually undone; the step times at
  one and two engines are printed.
- A run whose learner bounds the step (async: generation keeps ahead) shrinks to `min_engines`, and the
  nodes of the engines it stopped are removed while the run goes on.

Each run trains until that is seen, then is stopped with Ctrl-C (it finishes its step); every group of
every step is trained on once. Marked slow (about 3.5 minutes): `make test PYTEST_ARGS="-m slow"`."""

import json
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from tests.orchestrator.placement.autoscaling_cluster import FakeCloud

pytestmark = [pytest.mark.engines, pytest.mark.slow]

GROWS = [
    "max_completion_length=128",
    "ignore_eos=true",
    "rollout.autoscale={min_engines: 1, max_engines: 2, window_steps: 2, cooldown_steps: 1}",
]
SHRINKS = [
    "max_staleness=1",
    "num_iterations=4",
    "rollout.engines=3",
    "rollout.autoscale={min_engines: 1, max_engines: 3, window_steps: 2, cooldown_steps: 2}",
]


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    cloud = FakeCloud(tmp_path_factory.mktemp("cloud"), head_cpus=2, most_rollout_nodes=3, idle_timeout_s=6)
    cloud.start()
    cloud.nodes = cloud.watch()
    yield cloud
    cloud.shutdown()


def test_a_pool_the_learner_waits_for_grows_onto_a_node_rays_autoscaler_launches(cloud, tmp_path):
    def judged(metrics, nodes):  # the growth served and was judged, and the nodes match the pool
        return any("raised throughput" in m["autoscale/reason"] for m in metrics) and nodes == metrics[-1]["rollout/engines"]

    metrics, nodes = _train_until(cloud, tmp_path / "run", GROWS, judged)
    (grew,) = [m["step"] for m in metrics if m["autoscale/decision"] == 1]
    assert "above grow_above=0.5" in metrics[grew - 1]["autoscale/reason"]
    pending = [m["step"] for m in metrics if m["rollout/engines_pending"] == 1]
    assert pending and pending[0] == grew + 1  # the engine waited for a node, and the run went on
    assert max(nodes) == 2 and nodes[0] <= 1  # the autoscaler launched a node for it
    serving = [m for m in metrics if m["rollout/engines"] == 2 and m["step"] > pending[-1] + 1]  # after its warm-up
    one = [m for m in metrics if 1 < m["step"] <= grew]
    _print_step_times(one, serving)
    (judgement,) = [m for m in metrics if "raised throughput" in m["autoscale/reason"]]
    if judgement["autoscale/decision"] == -1:  # undone: back to one engine, and its node removed
        assert "back to 1" in judgement["autoscale/reason"] and metrics[-1]["rollout/engines"] == 1
    _all_groups_once(tmp_path / "run", metrics)


def test_a_pool_that_keeps_ahead_of_the_learner_shrinks_and_its_nodes_are_removed(cloud, tmp_path):
    def shrunk(metrics, nodes):
        return metrics[-1]["rollout/engines"] == 1 and nodes == 1

    metrics, nodes = _train_until(cloud, tmp_path / "run", SHRINKS, shrunk)
    assert max(nodes) == 3 and metrics[0]["rollout/engines"] == 3
    shrinks = [m for m in metrics if m["autoscale/decision"] == -1]
    assert len(shrinks) == 2 and all("below shrink_below=0.1" in m["autoscale/reason"] for m in shrinks)
    assert not any(m["autoscale/decision"] == 1 for m in metrics)
    _all_groups_once(tmp_path / "run", metrics)


def _train_until(cloud, run, args, seen, timeout_s=900):
    """Trains on `cloud` until `seen(metrics so far, rollout nodes alive now)`, then stops the run with
    Ctrl-C; returns its metrics and the rollout node counts seen meanwhile."""
    with open(run.parent / "stderr", "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "train", "max_steps=1000", "plot_steps=1000",
             "rollout.cpu_threads_bind=nobind", *args, f"output_dir={run}"],
            stdout=stderr, stderr=stderr, env=cloud.env,
        )  # fmt: skip
    counts, deadline = [], time.monotonic() + timeout_s
    try:
        while not seen(metrics := _metrics(run), nodes := _nodes_now(cloud)):
            assert proc.poll() is None, (run.parent / "stderr").read_text()[-4000:]
            assert time.monotonic() < deadline, [m["autoscale/reason"] for m in metrics]
            counts.append(nodes)
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)  # finishes the step under way, then stops
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (run.parent / "stderr").read_text()[-4000:]
    return _metrics(run), counts + [nodes]


def _metrics(run) -> list[dict]:
    path = run / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [json.loads(line) for line in lines if line.endswith("}")] or [{"rollout/engines": -1, "autoscale/reason": ""}]


def _nodes_now(cloud) -> int:
    lines = cloud.nodes.read_text().splitlines()
    return json.loads(lines[-1])["rollout_nodes"] if lines else 0


def _print_step_times(one: list[dict], two: list[dict]) -> None:
    assert one and two, "no step measured at one engine, or none at two after the new engine's warm-up"
    before = sum(m["time/step"] for m in one) / len(one)
    after = sum(m["time/step"] for m in two) / len(two)
    print(
        f"\nmean step: {before:.2f} s at 1 engine ({len(one)} steps), {after:.2f} s at 2 ({len(two)} steps): {before / after:.2f}x"
    )


def _all_groups_once(run, metrics: list[dict]) -> None:
    table = pq.read_table(run / "rollouts")
    keys = list(zip(*(table.column(c).to_pylist() for c in ("step", "group_id", "sample_index"))))
    assert len(set(keys)) == len(keys) and {k[0] for k in keys} == {m["step"] for m in metrics}
    assert len(keys) == 64 * len(metrics)
