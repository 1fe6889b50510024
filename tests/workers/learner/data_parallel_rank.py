"""One learner rank in its own process, for test_data_parallel.py (world size 1: the plain learner).

    python data_parallel_rank.py WORK_DIR RANK WORLD_SIZE PORT

Reads WORK_DIR/run.json (TrainConfig fields, model and tokenizer folders) and WORK_DIR/shards-RANK.pkl
(this rank's batch for each step); writes WORK_DIR/result-RANK-of-WORLD_SIZE.pt: the gradient of the
first batch before any step, the weight elements this rank holds, then each step's metrics and the
weights after it (with learner.fsdp, gathered whole on rank 0, none on the others).
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import torch

from orchestrator.config.train import TrainConfig
from workers.learner.data_parallel import DataParallelRank, join
from workers.learner.grpo import GRPOLearner


def main(work: Path, rank: int, world_size: int, port: int) -> None:
    run = json.loads((work / "run.json").read_text())
    config = TrainConfig(**run["config"])
    if world_size > 1:
        join(DataParallelRank(rank, world_size, "127.0.0.1", port, timeout_s=300), use_gpu=bool(config.learner.num_gpus))
    learner = GRPOLearner(config, run["model"], run["tokenizer"])
    batches = pickle.loads((work / f"shards-{rank}.pkl").read_bytes())

    (part,), _ = learner.prepare_round(batches[0], config.learner.micro_batch_size, config.learner.max_tokens_per_micro_batch)
    learner.accumulate_gradients(part)  # train_step's first update, before its optimizer step
    model = learner.trainer.accelerator.unwrap_model(learner.model)  # DDP's wrapper prefixes every name
    gradients = {name: _whole(p.grad).cpu() for name, p in model.named_parameters() if p.grad is not None}
    held = sum(_local(p).numel() for p in model.parameters())
    learner.optimizer.zero_grad(set_to_none=True)

    metrics, weights = [], []
    for batch in batches:
        metrics.append(learner.train_step(batch))
        weights.append({name: tensor.cpu().clone() for name, tensor in learner.named_weights()})
    result = {"gradients": gradients, "held": held, "metrics": metrics, "weights": weights}
    torch.save(result, work / f"result-{rank}-of-{world_size}.pt")


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded (FSDP2) tensor gathered from every rank; a plain one as it is."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
