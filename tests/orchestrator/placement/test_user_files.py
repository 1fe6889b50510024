"""The user's reward and tool files reach every node as the driver read them (contracts/user_functions.py).

Two raylets on this machine (`ray.cluster_utils.Cluster`): the head, which the driver joins and which
has no CPU, and a worker node that hosts the engine, the learner and the reward tasks.
`python -m orchestrator train` runs the lookup task with a reward file and a tool file that live only
in the config's folder. Once the driver has read them, and before anything generates, the test
replaces the reward file with a stale version (rewards -7) and deletes the tool file, so no node's disk
holds either as the driver read it. The run trains to the end, every reward is the shipped function's,
and every tool call answered with the shipped tool.

The timing is deterministic: the driver prints "run folder:" after it has read every user file (its
checks, before Ray starts anything) and before it starts the learner and the engines; the files change
as soon as the line is seen, and the test checks that no engine actor existed yet, so no tool call and
no reward task can have run before. Each reward task reserves a CPU (`reward_num_cpus: 1`), which only
the worker node has, and records the node it ran on: every one ran on the raylet the driver is not on.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from orchestrator.builtin import lookup_task

pytestmark = [pytest.mark.engines, pytest.mark.slow]

STEPS, PROMPTS, GENERATIONS = 3, 4, 4
LOOKUP = Path(__file__).parents[3] / "configs" / "tools" / "lookup.yaml"
BONUS = 0.25  # the shipped reward's mark: the built-in reward plus this
REWARD = """
import ray

from orchestrator.builtin.lookup_task import exact_code_reward  # an installed package: imported where it runs


def reward(prompts, completions, answer, **kwargs):
    with open(NODES, "a") as nodes:  # where this reward task ran
        nodes.write(ray.get_runtime_context().get_node_id() + "\\n")
    return [value + BONUS for value in exact_code_reward(prompts, completions, answer)]
"""
STALE_REWARD = """
def reward(prompts, completions, **kwargs):
    return [-7.0] * len(completions)
"""
TOOL = """
from orchestrator.builtin.lookup_task import lookup as table_lookup


def lookup(call_text, **context):
    return table_lookup(call_text, **context)
"""


@pytest.fixture
def cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        cluster.worker = cluster.add_node(num_cpus=3)  # one engine, the learner and a reward task, a CPU each
        yield cluster
    finally:
        cluster.shutdown()


def actors(cluster, name: str) -> list[dict]:
    return [a for a in cluster.global_state.actor_table(None).values() if a["ActorClassName"] == name]


def test_the_drivers_reward_and_tool_files_run_on_every_node(cluster, tmp_path):
    user = tmp_path / "user"  # the only place the files ever are
    user.mkdir()
    nodes = tmp_path / "reward-nodes.txt"
    (user / "my_rewards.py").write_text(f"NODES, BONUS = {str(nodes)!r}, {BONUS}\n" + REWARD)
    (user / "my_tools.py").write_text(TOOL)
    config = yaml.safe_load(LOOKUP.read_text())
    config.update(
        reward_funcs=["my_rewards.py:reward"],  # relative: read from the config's folder
        reward_num_cpus=1,  # a CPU the head does not have: the reward tasks run on the worker node
        prompts_per_step=PROMPTS,
        num_generations=GENERATIONS,
        max_steps=STEPS,
        output_dir=str(tmp_path / "run"),
        plot_steps=100,
    )
    config["tools"][0]["fn"] = "my_tools.py:lookup"
    (user / "config.yaml").write_text(yaml.safe_dump(config))

    run = tmp_path / "run"
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    with open(tmp_path / "stdout", "w") as stdout, open(tmp_path / "stderr", "w") as stderr:  # files: a full pipe stalls
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "train", "--config", str(user / "config.yaml")],
            stdout=stdout,
            stderr=stderr,
            env=env,
        )
    try:
        deadline = time.monotonic() + 300
        while not any("run folder:" in (tmp_path / name).read_text() for name in ("stdout", "stderr")):  # files read
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr").read_text()[-4000:]
            time.sleep(0.02)
        (user / "my_rewards.py").write_text(STALE_REWARD)
        (user / "my_tools.py").unlink()
        assert not actors(cluster, "RolloutWorker"), "an engine existed before the files changed: the test proves nothing"
        proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()

    out, err = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    assert proc.returncode == 0, err[-4000:]
    assert f"done: {STEPS} steps" in out

    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in steps] == list(range(1, STEPS + 1))
    rows = pq.read_table(run / "rollouts").to_pylist()
    assert len(rows) == STEPS * PROMPTS * GENERATIONS
    answers = {record["prompt"]: record["answer"] for record in lookup_task.records()}
    for row in rows:  # the shipped reward's values, never the stale file's -7
        expected = lookup_task.exact_code_reward([row["prompt"]], [row["completion"]], [answers[row["prompt"]]])[0] + BONUS
        assert row["reward"] == pytest.approx(expected), row

    calls = [call for row in rows for call in row["tool_calls"]]
    assert calls, "the lookup model called no tool"
    for call in calls:  # the tool file was gone from every disk: only the shipped copy can have answered
        assert call["status"] == "ok", call
        assert call["result"].strip() == lookup_task.lookup(call["call"]).strip(), call
    assert set(nodes.read_text().split()) == {cluster.worker.node_id}  # every reward task, on the other raylet
    # The tool hosts started (Ray places them near their engine where it can: a soft preference, so
    # their node is not asserted); the tool file was gone from every disk when they loaded it.
    assert [host for host in actors(cluster, "ToolHost") if host["Pid"]]
    assert cluster.worker.node_id != cluster.head_node.node_id
