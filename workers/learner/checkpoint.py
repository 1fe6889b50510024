"""A learner's checkpoint: what `train --resume` and a learner restart continue from exactly.

    step-N/   the model as transformers and vLLM load it (with LoRA: PEFT's adapter folder, lora.py),
              the canonical tokenizer, and learner_state.pt: optimizer, scheduler, the CPU's and every
              visible GPU's RNG state, policy version

Sharded (`learner.fsdp`), every rank calls `save` (the optimizer state is gathered) and rank 0
writes; `load` reads the whole state on every rank (sharding.py).
"""

from __future__ import annotations

import torch

from orchestrator.contracts.learning import LEARNER_STATE
from workers.learner import lora, sharding


def save(learner, folder: str) -> None:
    optimizer = _optimizer_state(learner)
    if not learner.trainer.accelerator.is_main_process:
        return
    model = learner.trainer.accelerator.unwrap_model(learner.model)
    if learner.config.lora is not None:
        lora.save_adapter(model, folder)  # PEFT's adapter folder, naming the base model
    else:
        model.save_pretrained(folder, safe_serialization=True, state_dict=learner.whole_weights)
    learner.tokenizer.save_pretrained(folder)
    state = {
        **optimizer,
        "scheduler": learner.trainer.lr_scheduler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,  # every visible GPU's
        "policy_version": learner.policy_version,
    }
    torch.save(state, f"{folder}/{LEARNER_STATE}")


def load(learner, folder: str) -> None:
    """Into a learner built on the checkpoint's weights (on the run's model, with LoRA: the adapter
    is loaded here). `train --resume` checked before Ray that the learner shards as the one that wrote
    it did (commands/train.py); a restart runs the same config."""
    if learner.config.lora is not None:
        lora.load_adapter(learner.trainer.accelerator.unwrap_model(learner.model), folder)
    path = f"{folder}/{LEARNER_STATE}"
    state = sharding.read_learner_state(path) if learner.sharded else torch.load(path, weights_only=True)
    if learner.sharded:
        sharding.load_whole_optimizer_state(learner.model, learner.optimizer.optimizer, state[sharding.WHOLE_OPTIMIZER])
    else:
        learner.optimizer.load_state_dict(state["optimizer"])
    learner.trainer.lr_scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    cuda_rng = state.get("cuda_rng")  # written on GPUs; restored where as many are visible (the learner sees its own)
    if cuda_rng is not None and torch.cuda.is_available() and len(cuda_rng) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_rng)
    learner.policy_version = state["policy_version"]


def _optimizer_state(learner) -> dict:
    if learner.sharded:
        return {sharding.WHOLE_OPTIMIZER: sharding.whole_optimizer_state(learner.model, learner.optimizer.optimizer)}
    return {"optimizer": learner.optimizer.state_dict()}
