"""A 2-rank data-parallel learner (one process per rank) trains exactly as one learner does, each rank
holding the whole model (DDP) or half of it (`learner.fsdp`: FSDP2).

Each rank runs in its own process (data_parallel_rank.py) on its shard of every step: whole groups,
uneven on purpose (3 groups and 2), so the padding of the smaller shard is exercised too. On CPU the
ranks meet over gloo; the `gpu` cases run them on two GPUs over NCCL (skipped without two).
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from orchestrator.learner.shards import shard_batch
from tests.workers.learner.grpo_steps import grpo_steps

ROOT = Path(__file__).resolve().parents[3]
RANK = Path(__file__).with_name("data_parallel_rank.py")
STEPS, GROUPS, GROUP_SIZE, TEMPERATURE = 5, 5, 2, 1.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run_ranks(work: Path, world_size: int, port: int, gpu: bool) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return [
        subprocess.Popen(
            [sys.executable, str(RANK), str(work), str(rank), str(world_size), str(port)],
            env={**env, "CUDA_VISIBLE_DEVICES": str(rank)} if gpu else env,  # a GPU per rank, as under Ray
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(world_size)
    ]


def _train(tiny, work: Path, config: dict, gpu: bool) -> tuple[dict, list[dict]]:
    """(the one-rank result, the two ranks' results) of the same run."""
    steps = grpo_steps(tiny, STEPS, GROUPS, GROUP_SIZE, TEMPERATURE)
    run = {"config": config, "model": str(tiny.model_dir), "tokenizer": str(tiny.tokenizer_dir)}
    (work / "run.json").write_text(json.dumps(run))
    whole = work / "whole"
    whole.mkdir()
    alone = {**config, "learner": {**config["learner"], "workers": 1, "fsdp": False}}  # nothing to shard over
    (whole / "run.json").write_text(json.dumps({**run, "config": alone}))
    (whole / "shards-0.pkl").write_bytes(pickle.dumps([batch for batch, _ in steps]))
    sharded = [shard_batch(batch, group_ids, 2) for batch, group_ids in steps]
    assert [len(shard["advantages"]) for shard in sharded[0]] == [6, 4]  # 3 groups and 2
    for rank in range(2):
        (work / f"shards-{rank}.pkl").write_bytes(pickle.dumps([shards[rank] for shards in sharded]))
    processes = _run_ranks(whole, 1, 0, gpu) + _run_ranks(work, 2, _free_port(), gpu)
    for process in processes:
        output, _ = process.communicate(timeout=600)
        assert process.returncode == 0, output[-4000:]
    one = torch.load(whole / "result-0-of-1.pt")
    two = [torch.load(work / f"result-{rank}-of-2.pt") for rank in range(2)]
    return one, two


def _worst(a: dict, b: dict) -> float:
    """The largest difference between two sets of tensors, relative to the largest element of `a`
    (packed micro-batches of other shapes sum in another order: float32 rounding, relative to size)."""
    assert a.keys() == b.keys() and a
    largest = max(float(a[name].abs().max()) for name in a)
    return max(float((a[name] - b[name]).abs().max()) for name in a) / max(largest, 1e-12)


_TWO_GPUS = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs"),
]


# Packed micro-batches under the default token budget, unless the case says otherwise; PADDED_BUDGET pads
# them, under a budget of 40 token slots: several micro-batches of uneven rows, matched across ranks.
PADDED_BUDGET = {"padding_free": False, "max_tokens_per_micro_batch": 40}


@pytest.mark.parametrize(
    "loss_type,micro_batch_size,beta,fsdp,gpu,learner",
    [
        ("dapo", 4, 0.0, False, False, {}),
        ("dapo", 4, 0.0, True, False, {}),
        ("grpo", None, 0.0, False, False, PADDED_BUDGET),
        pytest.param("grpo", None, 0.0, False, False, {}, marks=pytest.mark.slow),
        pytest.param("bnpo", 3, 0.1, False, False, {}, marks=pytest.mark.slow),
        pytest.param("bnpo", 3, 0.1, True, False, {}, marks=pytest.mark.slow),
        pytest.param("dapo", 4, 0.0, False, True, {}, marks=_TWO_GPUS),
        pytest.param("dapo", 4, 0.0, True, True, {}, marks=_TWO_GPUS),
    ],
)
def test_two_ranks_train_the_same_run_as_one(tiny, tmp_path, loss_type, micro_batch_size, beta, fsdp, gpu, learner):
    config = {
        "num_generations": GROUP_SIZE,
        "prompts_per_step": GROUPS,
        "max_steps": STEPS,
        "learning_rate": 1e-3,
        "temperature": TEMPERATURE,
        "loss_type": loss_type,
        "beta": beta,  # with a KL term, each rank holds its own reference model
        # Per-token ratios: a sequence's ratio, the exponential of a sum over its tokens, magnifies the rounding
        # in which ranks and one learner differ past what these tolerances allow after a few Adam steps.
        "vllm_importance_sampling_mode": "token_truncate",
        "learner": {"workers": 2, "micro_batch_size": micro_batch_size, "fsdp": fsdp, "num_gpus": int(gpu), **learner},
    }
    one, two = _train(tiny, tmp_path, config, gpu)
    close = 1e-4 if gpu else 1e-5  # GPU kernels sum in an order that depends on the batch's shape
    assert _worst(one["gradients"], two[0]["gradients"]) <= close
    if fsdp:  # each rank holds half the weights (every weight's first dimension is even)
        assert [rank["held"] for rank in two] == [one["held"] // 2] * 2, (one["held"], [rank["held"] for rank in two])
    else:
        assert [rank["held"] for rank in two] == [one["held"]] * 2
    for step in range(STEPS):
        for rank in (0, 1):
            metrics = two[rank]["metrics"][step]
            assert metrics["loss"] == pytest.approx(one["metrics"][step]["loss"], abs=1e-4)
            assert metrics["grad_norm"] == pytest.approx(one["metrics"][step]["grad_norm"], rel=close)
            for key in (
                "sampling/sampling_logp_difference/mean",
                "sampling/sampling_logp_difference/max",
                "sampling/importance_sampling_ratio/mean",
                "sampling/importance_sampling_ratio/max",
            ):
                expected = one["metrics"][step].get(key)
                assert (key in metrics) == (expected is not None)
                assert expected is None or metrics[key] == pytest.approx(expected, rel=close, abs=close)
        if fsdp:  # rank 0 alone gathers the weights whole
            assert two[1]["weights"][step] == {}
        else:
            assert _worst(two[0]["weights"][step], two[1]["weights"][step]) == 0.0  # the ranks never drift apart
        # Adam divides each gradient by its own running scale, so rounding in a near-zero gradient moves
        # its weight by up to the learning rate: ten times the gradients' tolerance.
        assert _worst(one["weights"][step], two[0]["weights"][step]) <= 10 * close
    assert one["metrics"][0]["loss"] != one["metrics"][-1]["loss"]  # the run did train
