"""The learner's GPU count: chosen from the cluster when `learner.num_gpus` is null, and a clear error
instead of a hang or a failed first sync when the config cannot work on the cluster."""

import pytest

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError
from orchestrator.placement.gpus import learner_gpus


def test_the_default_takes_a_gpu_exactly_when_the_cluster_has_gpus():
    config = TrainConfig()
    assert config.learner.num_gpus is None
    assert learner_gpus(config, cluster_gpus=0, local=True) == 0
    assert learner_gpus(config, cluster_gpus=2, local=True) == 1
    assert learner_gpus(config, cluster_gpus=8, local=False) == 1


def test_an_explicit_count_is_kept():
    assert learner_gpus(TrainConfig(learner={"num_gpus": 0}), cluster_gpus=0, local=True) == 0
    assert learner_gpus(TrainConfig(learner={"num_gpus": 1}), cluster_gpus=4, local=True) == 1
    # Across nodes GPU nodes may still be joining: the placement deadline decides, not this count.
    assert learner_gpus(TrainConfig(learner={"num_gpus": 1}), cluster_gpus=0, local=False) == 1


def test_a_cpu_learner_on_a_gpu_cluster_is_refused_naming_the_key():
    with pytest.raises(
        UserError, match=r"learner.num_gpus is 0 but the cluster has 4 GPUs.*set learner.num_gpus to 1 or to null"
    ):
        learner_gpus(TrainConfig(learner={"num_gpus": 0}), cluster_gpus=4, local=False)


def test_one_machine_without_enough_gpus_for_learner_and_engines_fails_before_starting():
    config = TrainConfig(rollout={"engines": 2, "tensor_parallel_size": 2})
    with pytest.raises(
        UserError, match=r"has 4 GPUs but the run needs 5: rollout.engines \(2\) x rollout.tensor_parallel_size \(2\)"
    ):
        learner_gpus(config, cluster_gpus=4, local=True)
    assert learner_gpus(config, cluster_gpus=5, local=True) == 1
    with pytest.raises(UserError, match="has 1 GPUs but the run needs 2"):  # server mode: the learner cannot share it
        learner_gpus(TrainConfig(vllm_mode="server"), cluster_gpus=1, local=True)
    with pytest.raises(UserError, match="has 0 GPUs but the run needs 1"):
        learner_gpus(TrainConfig(learner={"num_gpus": 1}), cluster_gpus=0, local=True)


def test_every_learner_worker_counts_its_own_gpus():
    config = TrainConfig(learner={"workers": 2}, rollout={"engines": 1})
    with pytest.raises(UserError, match=r"has 2 GPUs but the run needs 3: .*learner.num_gpus \(1\) x learner.workers \(2\)"):
        learner_gpus(config, cluster_gpus=2, local=True)
    assert learner_gpus(config, cluster_gpus=3, local=True) == 1  # per worker


def test_more_than_one_gpu_per_learner_worker_is_refused_naming_the_key():
    """One worker with 2 GPUs would make transformers set n_gpu=2, and TRL refuses nn.DataParallel: more
    GPUs are more data-parallel workers."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"learner\.num_gpus[\s\S]*less than or equal to 1"):
        TrainConfig(learner={"num_gpus": 2})


def test_a_gpu_cluster_driven_by_a_cpu_build_of_torch_stops_in_one_line():
    """`make train` then `make train DEVICE=gpu` in one venv keeps the CPU torch: say so, not NCCL's error."""
    from orchestrator.placement.gpus import check_torch_build

    check_torch_build(0, "2.13.0+cpu", None, "/venv")  # no GPUs: the CPU build is right
    check_torch_build(2, "2.13.0", "13.0", "/venv")
    with pytest.raises(UserError, match=r"2 GPUs but torch 2.13.0\+cpu in /venv is a CPU build: .*VENV=.venv-gpu"):
        check_torch_build(2, "2.13.0+cpu", None, "/venv")


def test_a_learner_given_a_gpu_it_cannot_see_refuses_to_train_on_the_cpu(tiny):
    """A CPU torch, or an NVIDIA driver too old for the CUDA build: refused before the model loads."""
    from workers.learner.grpo import GRPOLearner

    config = TrainConfig(learner={"num_gpus": 1})
    with pytest.raises(UserError, match=r"learner.num_gpus is 1 but torch .* sees no GPU here .*NVIDIA driver"):
        GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))


def test_one_gpu_runs_the_default_config_colocated_and_a_server_run_that_does_not_fit_is_told_to_colocate():
    from orchestrator.placement.gpus import decide_vllm_mode

    colocated = decide_vllm_mode(TrainConfig(), cluster_gpus=1, local=True)
    assert colocated.vllm_mode == "colocate" and learner_gpus(colocated, cluster_gpus=1, local=True) == 1
    assert decide_vllm_mode(TrainConfig(), cluster_gpus=2, local=True).vllm_mode == "server"  # it fits: engines of their own
    assert decide_vllm_mode(TrainConfig(), cluster_gpus=1, local=False).vllm_mode == "server"  # a cluster may grow
    assert decide_vllm_mode(TrainConfig(), cluster_gpus=0, local=True).vllm_mode is None  # CPU: unused
    with pytest.raises(UserError, match=r"has 1 GPUs but the run needs 2: .*set vllm_mode: colocate"):
        learner_gpus(TrainConfig(vllm_mode="server"), cluster_gpus=1, local=True)
    two_engines = decide_vllm_mode(TrainConfig(rollout={"engines": 2}), cluster_gpus=1, local=True)
    assert two_engines.vllm_mode == "server"  # it cannot colocate (an engine per learner worker): the refusal says why
    with pytest.raises(
        UserError, match=r"needs 3: .*vllm_mode: colocate does not fit this config either \(.*set rollout.engines"
    ):
        learner_gpus(two_engines, cluster_gpus=1, local=True)


def test_colocation_takes_an_engine_per_learner_worker_and_a_sync_it_can_run_naming_the_keys():
    from pydantic import ValidationError

    with pytest.raises(
        ValidationError, match=r"vllm_mode: colocate puts one engine on each learner worker's GPU: set rollout.engines"
    ):
        TrainConfig(vllm_mode="colocate", rollout={"engines": 2})
    with pytest.raises(ValidationError, match=r"weight_sync.backend: nccl needs a rank per GPU"):
        TrainConfig(vllm_mode="colocate", weight_sync={"backend": "nccl"})
    config = TrainConfig(vllm_mode="colocate", learner={"workers": 2}, rollout={"engines": 2})
    assert learner_gpus(config, cluster_gpus=2, local=True) == 1  # two GPUs, each a learner worker and an engine


def test_device_cuda_waits_for_gpus_still_to_join_a_cluster_and_device_cpu_takes_none(ray_session):
    """KubeRay GPU pods may register after the run starts: `device: cuda` keeps the GPU plan on a cluster
    of several nodes (the actors wait for the GPUs), and on one machine says what is missing."""
    from orchestrator.placement.gpus import with_learner_gpus

    assert ray_session.device == "cpu"  # the suite's Ray has no GPU
    waiting = with_learner_gpus(TrainConfig(device="cuda"), local=False, device="cuda")
    assert waiting.learner.num_gpus == 1 and waiting.vllm_mode == "server"
    with pytest.raises(UserError, match="device is cuda but Ray sees no GPU on this machine: set device: auto or cpu"):
        with_learner_gpus(TrainConfig(device="cuda"), local=True, device="cuda")
    on_cpu = with_learner_gpus(TrainConfig(device="cpu"), local=True, device="cpu")
    assert on_cpu.learner.num_gpus == 0 and on_cpu.vllm_mode is None
