"""The GPU path: CUDA engines and weights over vLLM's NCCL weight-transfer engine, from one learner and
from a sharded learner group. Skipped without CUDA GPUs (CI has none); run on a GPU machine with
`pytest -m gpu`."""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (learner + engine)"
    ),
]


def test_train_syncs_every_engine_over_nccl(tmp_path):
    run = tmp_path / "run"
    engines = min(2, torch.cuda.device_count() - 1)  # one GPU per engine plus one for the learner
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "train",
            "max_steps=3",
            f"rollout.engines={engines}",
            "learner.num_gpus=1",
            "rollout.gpu_memory_utilization=0.3",
            "rollout.dtype=float32",
            f"output_dir={run}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["policy_version"] for m in metrics] == [0, 1, 2]
    assert all(m["weight_sync/checksum"] == "unverified" for m in metrics)  # the NCCL path ran
    assert max(m["sampling/sampling_logp_difference/mean"] for m in metrics) < 0.01


@pytest.mark.skipif(torch.cuda.device_count() < 3, reason="needs 3 CUDA GPUs (two learner ranks + an engine)")
def test_a_sharded_learner_group_syncs_engines_over_nccl(tmp_path):
    """Two FSDP2 ranks (NCCL between them); rank 0 gathers the weights and broadcasts them to the engine."""
    run = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "train",
            "max_steps=3",
            "rollout.engines=1",
            "learner.num_gpus=1",
            "learner.workers=2",
            "learner.fsdp=true",
            "rollout.gpu_memory_utilization=0.3",
            "rollout.dtype=float32",
            f"output_dir={run}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["policy_version"] for m in metrics] == [0, 1, 2]
    assert all(m["weight_sync/checksum"] == "unverified" for m in metrics)
    assert max(m["sampling/sampling_logp_difference/mean"] for m in metrics) < 0.01
