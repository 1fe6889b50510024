"""The GPU path on one GPU (`vllm_mode: colocate`): the default run, a bf16 engine beside an fp32 learner
with TRL's importance-sampling correction, and LoRA, each with the learner and its engine sharing the GPU
and the weights going through the object store. Skipped without a CUDA GPU (CI has none); run on a
GPU machine with `pytest -m gpu`. The tests that need two GPUs or more (NCCL between learner and
engines, data-parallel ranks) are in test_nccl_transport.py and tests/workers/learner/test_data_parallel.py."""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs 1 CUDA GPU")]


def _train(run, *overrides: str) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", "max_steps=3", "vllm_mode=colocate", f"output_dir={run}", *overrides],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_default_run_trains_on_one_gpu_colocated(tmp_path):
    metrics = _train(tmp_path / "run", "rollout.dtype=float32")
    assert [m["policy_version"] for m in metrics] == [0, 1, 2]
    assert all(m["weight_sync/transport"] == "object_store" and len(m["weight_sync/checksum"]) == 16 for m in metrics)
    assert max(m["sampling/sampling_logp_difference/max"] for m in metrics) < 1e-3  # fp32 on both sides


def test_a_bf16_engine_beside_an_fp32_learner_is_corrected(tmp_path):
    metrics = _train(tmp_path / "run", "rollout.dtype=bfloat16", "vllm_importance_sampling_correction=true")
    assert all(m["weight_sync/transport"] == "object_store" for m in metrics)
    assert max(m["sampling/sampling_logp_difference/mean"] for m in metrics) < 0.05
    assert all("sampling/importance_sampling_ratio/mean" in m for m in metrics)


def test_lora_trains_on_one_gpu_colocated(tmp_path):
    metrics = _train(tmp_path / "run", "lora.r=8", "learning_rate=1e-3")
    assert [m["policy_version"] for m in metrics] == [0, 1, 2]
    assert all(m["weight_sync/transport"] == "object_store" for m in metrics)
