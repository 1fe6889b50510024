"""Placement on a simulated multi-node cluster (`ray.cluster_utils.Cluster`): rollout engines land
only on nodes labelled role=rollout, the learner only on its node, the reward-model worker only on
the node labelled role=reward, and a short run works across them. Engines get the tokenizer as bytes and their weights from the learner: they read no files."""

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.engines

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import ray
    from ray.cluster_utils import Cluster

    from orchestrator.builtin import search_task
    from orchestrator.builtin.tiny_model import tiny_model
    from orchestrator.config.train import TrainConfig
    from orchestrator.builtin.tiny_reward_model import short_preferring_reward_model
    from orchestrator.placement.labels import LEARNER_ROLE, REWARD_ROLE, ROLE_LABEL, ROLLOUT_ROLE
    from orchestrator.launch import canonical_tokenizer, start_training
    from orchestrator.training.loop import GRPORun
    from orchestrator.training.requests import PromptSet
    from orchestrator.training.run_dir import RunDir

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    rollout_nodes = [cluster.add_node(num_cpus=1, labels={ROLE_LABEL: ROLLOUT_ROLE}) for _ in range(2)]
    learner_node = cluster.add_node(num_cpus=2, labels={ROLE_LABEL: LEARNER_ROLE})
    reward_node = cluster.add_node(num_cpus=1, labels={ROLE_LABEL: REWARD_ROLE})
    cluster.add_node(num_cpus=2)  # an unlabelled node that must stay unused
    ray.init(address=cluster.address)

    tiny = tiny_model()
    config = TrainConfig(
        prompts_per_step=2, num_generations=4, max_completion_length=12, max_steps=2, learning_rate=1e-3,
        rollout={"engines": 2}, output_dir=sys.argv[1],
        reward_funcs=["builtin:search_call", str(short_preferring_reward_model())], reward_weights=[1.0, 0.1],
    )
    parts = start_training(config, str(tiny.model_dir), canonical_tokenizer(config, str(tiny.tokenizer_dir)))
    run_dir = RunDir.create(config.output_dir)
    run_dir.prepare({})
    metrics = GRPORun(config, PromptSet.of_texts(search_task.all_prompts(), parts.tokenizer), run_dir, parts).run()
    print("RESULT " + json.dumps({
        "rollout_nodes": [n.node_id for n in rollout_nodes],
        "learner_node": learner_node.node_id,
        "engine_nodes": [ray.get(a.node_id.remote()) for a in parts.pool.engines.actors.values()],
        "learner_on": parts.learner.node_ids()[0],
        "reward_node": reward_node.node_id,
        "reward_model_nodes": ray.get([worker.node.remote() for worker in parts.reward_models.workers]),
        "reward_model_scores": [m["rewards/model/mean"] for m in metrics],
        "placement": parts.pool.engines.cluster.placement.mode,
        "lp_diff": max(m["sampling/sampling_logp_difference/mean"] for m in metrics),
        "steps": len(metrics),
    }))
    parts.shutdown()
    ray.shutdown()
    cluster.shutdown()
    """
)


def test_engines_and_learner_land_on_their_labelled_nodes(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "run")], capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["placement"] == "labels"
    assert sorted(result["engine_nodes"]) == sorted(result["rollout_nodes"])  # one engine on each rollout node
    assert result["learner_on"] == result["learner_node"]
    assert result["reward_model_nodes"] == [result["reward_node"]]
    assert all(-1.0 < score < 0.0 for score in result["reward_model_scores"])  # scored by the model every step
    assert result["steps"] == 2 and result["lp_diff"] < 0.01
