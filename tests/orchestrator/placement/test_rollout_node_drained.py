"""A rollout node that Ray drains mid-run (`ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION`, what a
spot instance's preemption notice becomes), on a multi-node cluster (`ray.cluster_utils.Cluster`: real
raylets on this machine, labelled as in the README). Within a second the run stops giving the node's
engine any group, takes back its queued ones, and starts a replacement on the other rollout node, before
the node goes; the node is then killed at its deadline. Every step finishes, every group is trained on
once, and the drained engine is not counted as a death.

The same run with the node killed without notice, its engine then a death, prints the same figure: the
time of the slowest step after the first, the one that waited for the replacement engine.

A drain of one of two engines, with steps whose prompts fit one engine's prefill budget only when split
between two: the other engine takes all of them, and no engine dies (CPU engines whose seeded requests
were prefilled in chunks died one after another there; workers/rollout/engine.py says why).

A drain whose 10 s notice is shorter than the completions under way (a model slow enough that each takes
longer): the drained engine hands its running samples back at once, cut short, and the other engine
continues them from their last token; nothing is generated twice and the learner's log-probs of every
token, the seams included, match the engines'. The same drain with `rollout.continuation: false`
prints its step time beside.

Marked slow (about 14 minutes in all): `make test PYTEST_ARGS="-m slow"` runs it."""

import json
import os
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from tests.orchestrator.placement.drains import drain, node_processes, take_node_away
from tests.random_llama import save_random_llama
from workers.rollout.shared_memory import mapped_by

pytestmark = [pytest.mark.engines, pytest.mark.slow]

STEPS, DEADLINE_S = 12, 30
ARGS = [
    "prompts_per_step=4",
    "num_generations=4",
    "max_completion_length=48",
    "ignore_eos=true",
    f"max_steps={STEPS}",
    "plot_steps=100",
]


def _cluster(rollout_nodes: int):
    from ray.cluster_utils import Cluster

    from orchestrator.placement.labels import LEARNER_RESOURCE, LEARNER_ROLE, ROLE_LABEL, ROLLOUT_RESOURCE, ROLLOUT_ROLE

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        rollout, learner = {ROLE_LABEL: ROLLOUT_ROLE}, {ROLE_LABEL: LEARNER_ROLE}
        cluster.rollout = [
            cluster.add_node(num_cpus=1, labels=rollout, resources={ROLLOUT_RESOURCE: 1}) for _ in range(rollout_nodes)
        ]
        cluster.learner = cluster.add_node(num_cpus=2, labels=learner, resources={LEARNER_RESOURCE: 1})
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture
def cluster():
    yield from _cluster(rollout_nodes=2)


@pytest.fixture
def three_rollout_nodes():
    yield from _cluster(rollout_nodes=3)


def _run_losing_a_node(cluster, tmp_path, args: list[str], after_steps: int, notice_s: int | None, engine: int = 0):
    """`train` with `args` on `cluster`; once `after_steps` steps are recorded, the node of its `engine`-th
    rollout engine is drained with `notice_s` seconds left (None: no notice) and taken away at that
    deadline. Returns (the run's return code, its stderr, its metrics lines, its run folder)."""
    run = tmp_path / "run"
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    with open(tmp_path / "stdout", "w") as stdout, open(tmp_path / "stderr", "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "train", *args, f"output_dir={run}"], stdout=stdout, stderr=stderr, env=env
        )
    metrics = run / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 600
        while not (metrics.is_file() and metrics.read_text().count("\n") >= after_steps):
            assert proc.poll() is None and time.monotonic() < deadline, f"the run ended or stalled before step {after_steps + 1}"
            time.sleep(0.05)
        engines = [a for a in cluster.global_state.actor_table(None).values() if a["ActorClassName"] == "RolloutWorker"]
        node_id = [a for a in engines if a["State"] == "ALIVE"][engine]["Address"]["NodeID"]
        (leaving,) = [node for node in cluster.rollout if node.node_id == node_id]
        mapped = mapped_by(p.pid for p in node_processes(leaving))
        if notice_s is not None:
            drain(cluster, node_id, notice_s)
            drained_at = time.monotonic()
            while proc.poll() is None and time.monotonic() < drained_at + notice_s:
                time.sleep(0.2)
        take_node_away(cluster, leaving, mapped_before=mapped)  # the deadline: the cloud takes the machine
        proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    steps = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    return proc.returncode, (tmp_path / "stderr").read_text(), steps, run


def _every_sample_once(run, samples: int) -> None:
    table = pq.read_table(run / "rollouts")
    keys = list(zip(*(table.column(c).to_pylist() for c in ("step", "group_id", "sample_index"))))
    assert len(keys) == samples and len(set(keys)) == len(keys)


@pytest.mark.parametrize("notice", [True, False], ids=["drained", "killed-without-notice"])
def test_a_rollout_node_that_goes_mid_run_loses_no_group(cluster, tmp_path, notice):
    code, err, steps, run = _run_losing_a_node(cluster, tmp_path, ARGS, after_steps=1, notice_s=DEADLINE_S if notice else None)
    assert code == 0, err[-4000:]
    assert [m["step"] for m in steps] == list(range(1, STEPS + 1))
    slowest = max(steps[1:], key=lambda m: m["time/step"])  # the step that waited for the replacement
    print(f"\n{'drained' if notice else 'killed without notice'}: slowest step {slowest['step']}, {slowest['time/step']:.1f} s")
    if notice:
        assert "engine 0 is on node" in err and "which Ray is draining (deadline in" in err, err[-4000:]
        assert "replacement engine 1 is starting" in err
        assert sum(m["rollout/engines_drained"] for m in steps) == 1
        assert steps[-1]["engine_restarts"] == 0  # drained, not dead
    else:
        assert steps[-1]["engine_restarts"] == 1 and sum(m["rollout/engines_drained"] for m in steps) == 0
    _every_sample_once(run, STEPS * 16)
    table = pq.read_table(run / "rollouts")
    assert {r["engine_id"] for r in table.to_pylist() if r["step"] == STEPS} == {1}  # the replacement serves


def test_a_drain_that_moves_a_large_steps_groups_to_one_engine_kills_no_engine(three_rollout_nodes, tmp_path):
    """64 prompts x 4 samples of 8-9 prompt tokens: about 1100 prompt tokens per engine with two engines, about
    2200 (more than the 2048 an engine step prefills) once one of them is drained and the other takes every
    group at the start of a step."""
    args = ["rollout.engines=2", "prompts_per_step=64", "num_generations=4", "max_completion_length=24", "ignore_eos=true"]
    args += ["max_steps=8", "plot_steps=100"]
    code, err, steps, run = _run_losing_a_node(three_rollout_nodes, tmp_path, args, after_steps=2, notice_s=10)
    assert code == 0, err[-4000:]
    assert [m["step"] for m in steps] == list(range(1, 9))
    assert sum(m["rollout/engines_drained"] for m in steps) == 1
    assert " died " not in err and steps[-1]["engine_restarts"] == 0, err[-4000:]
    times = [m["time/step"] for m in steps[1:]]
    print(f"\nstep times after the first (s): {' '.join(f'{t:.1f}' for t in times)}")
    _every_sample_once(run, 8 * 256)


def _slow_model(folder, tokenizer_dir):
    """A random Llama of 4 layers of 512 with a 2048-token context: a 1200-token completion takes a CPU
    engine longer than a 10 s notice."""
    from transformers import AutoTokenizer

    save_random_llama(folder, AutoTokenizer.from_pretrained(tokenizer_dir), hidden=512, heads=8, layers=4, context=2048)


@pytest.mark.parametrize("continuation", [True, False], ids=["continued", "finished-before-it-stops"])
def test_a_drain_shorter_than_the_completions_under_way_continues_them_elsewhere(
    three_rollout_nodes, tmp_path, tiny, continuation
):
    model = tmp_path / "slow-model"
    _slow_model(model, tiny.tokenizer_dir)
    steps_in_all = 4
    args = [f"model={model}", "rollout.engines=2", "prompts_per_step=2", "num_generations=2", "max_completion_length=1200"]
    args += [
        "ignore_eos=true",
        f"max_steps={steps_in_all}",
        "plot_steps=100",
        f"rollout.continuation={str(continuation).lower()}",
    ]
    code, err, steps, run = _run_losing_a_node(three_rollout_nodes, tmp_path, args, after_steps=1, notice_s=10)
    assert code == 0, err[-4000:]
    assert [m["step"] for m in steps] == list(range(1, steps_in_all + 1))
    (drained,) = [m for m in steps if m["rollout/engines_drained"]]
    regenerated = sum(m[f"rollout/samples_regenerated/{why}"] for m in steps for why in ("death", "timeout"))
    print(
        f"\ncontinuation {continuation}: drained step {drained['step']} took {drained['time/step']:.1f} s; "
        f"{drained['rollout/samples_continued']} sample(s) continued ({drained['rollout/tokens_continued']} tokens), "
        f"{regenerated} generated again; worst log-prob gap {drained['sampling/sampling_logp_difference/max']:.1e}"
    )
    _every_sample_once(run, steps_in_all * 4)
    if continuation:
        assert drained["rollout/tokens_continued"] > 0 and regenerated == 0
        assert drained["sampling/sampling_logp_difference/max"] < 1e-3  # the seams are token-exact
