"""`vllm_mode: colocate` on a Ray cluster with one logical GPU (this machine has none): the learner and
its engine are placed in one bundle of one placement group, on the same GPU, split by
vllm_gpu_memory_utilization; the engine's vLLM is told that share; a replaced engine goes back into the
slot; and a colocation that cannot fit is refused naming vllm_mode: colocate. The actors are stand-ins
that report where Ray put them (a CUDA engine cannot start here)."""

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import ray

    from orchestrator.config.train import TrainConfig
    from orchestrator.contracts.errors import UserError
    from orchestrator.launch import Cluster
    from orchestrator.placement.colocation import Colocation
    from orchestrator.placement.placement import Placement
    from orchestrator.rollout.fleet import EngineFleet
    from orchestrator.rollout.launcher import EngineLauncher
    from workers.learner.model_setup import load_tokenizer

    class Where:
        def where(self):
            context = ray.get_runtime_context()
            return {"gpus": ray.get_gpu_ids(), "group": context.get_placement_group_id(),
                    "share": context.get_assigned_resources().get("GPU")}

        def start(self):
            return None

    class Launcher(EngineLauncher):
        def __init__(self):
            self.launched = {}

        def launch(self, engine_id, model, tokenizer_ref, config, device, seed, options):
            actor = ray.remote(Where).options(**options).remote()
            self.launched[engine_id] = (actor, config.gpu_memory_utilization, options["scheduling_strategy"].placement_group_bundle_index)
            return actor

        def kill(self, handle):
            ray.kill(handle)

    ray.init(num_cpus=4, num_gpus=1, include_dashboard=False)
    cluster = Cluster(placement=Placement("local"), device="cuda")
    config = TrainConfig(vllm_mode="colocate", vllm_gpu_memory_utilization=0.35)
    colocation = Colocation.reserve(cluster.placement, config, timeout_s=30)
    learner = ray.remote(Where).options(**colocation.learner_options(0)).remote()
    launcher = Launcher()
    fleet = EngineFleet(cluster, None, load_tokenizer(sys.argv[1], []), config.rollout, launcher=launcher, colocation=colocation)
    first = fleet.add_engine()
    result = {"learner": ray.get(learner.where.remote()), "engine": ray.get(launcher.launched[first][0].where.remote()),
              "engine_memory": launcher.launched[first][1], "slot": launcher.launched[first][2]}
    try:
        fleet.add_engine()
        result["second"] = "started"
    except UserError as error:
        result["second"] = str(error)
    fleet.kill(first)
    replacement = fleet.add_engine()
    result["replacement"] = {"slot": launcher.launched[replacement][2],
                             "where": ray.get(launcher.launched[replacement][0].where.remote(), timeout=60)}
    try:
        Colocation.reserve(cluster.placement, TrainConfig(vllm_mode="colocate", learner={"workers": 2}, rollout={"engines": 2}), timeout_s=2)
        result["two"] = "reserved"
    except UserError as error:
        result["two"] = str(error)
    print("RESULT " + json.dumps(result))
    """
)


def test_a_colocated_learner_and_engine_share_one_gpu_in_one_bundle(tiny):
    command = [sys.executable, "-c", SCRIPT, str(tiny.tokenizer_dir)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    learner, engine = result["learner"], result["engine"]
    assert learner["gpus"] == engine["gpus"] == [0] and learner["group"] == engine["group"] is not None
    assert learner["share"] == 0.65 and engine["share"] == 0.35 and result["engine_memory"] == 0.35
    assert result["slot"] == 0 and "room for 1 engine(s), one per learner worker's GPU" in result["second"]
    assert result["replacement"]["slot"] == 0 and result["replacement"]["where"]["gpus"] == [0]
    assert "no learner node can host 2 x" in result["two"] and "vllm_mode: colocate" in result["two"]


def test_a_colocated_learner_is_capped_below_its_engines_share_unless_told_otherwise():
    """vLLM starts only where its share of the GPU is free: the learner's allocator stays out of it, so a
    replacement engine can start after the learner has trained."""
    from orchestrator.config.train import TrainConfig
    from orchestrator.placement.colocation import learner_within_its_share

    assert learner_within_its_share(TrainConfig(vllm_mode="colocate")).learner.max_gpu_memory_fraction == 0.65
    chosen = TrainConfig(vllm_mode="colocate", vllm_gpu_memory_utilization=0.5, learner={"max_gpu_memory_fraction": 0.4})
    assert learner_within_its_share(chosen).learner.max_gpu_memory_fraction == 0.4
