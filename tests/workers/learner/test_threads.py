"""The learner's torch threads: Ray would leave a CPU learner one thread per reserved CPU."""

from orchestrator.contracts.learning import LearnerConfig
from workers.learner.actor import torch_threads


def test_a_cpu_learner_uses_the_nodes_cores_shared_by_its_workers():
    assert torch_threads(LearnerConfig(num_cpus=1, num_gpus=0), cores=16, gpu=False) == 16
    assert torch_threads(LearnerConfig(workers=2, num_gpus=0), cores=16, gpu=False) == 8
    assert torch_threads(LearnerConfig(workers=4, num_gpus=0), cores=2, gpu=False) == 1


def test_a_gpu_learner_keeps_rays_threads_and_a_setting_wins():
    assert torch_threads(LearnerConfig(num_gpus=1), cores=16, gpu=True) is None
    assert torch_threads(LearnerConfig(num_gpus=1, torch_threads=4), cores=16, gpu=True) == 4
    assert torch_threads(LearnerConfig(num_gpus=0, torch_threads=3), cores=16, gpu=False) == 3
