"""FSDP2 for a learner group (`learner.fsdp`): weights, gradients and optimizer state sharded over the ranks.

accelerate does the sharding (TRL's trainer is built with GRPOConfig's fsdp settings). What the
rest of the learner needs whole is gathered with torch's state-dict API, every rank taking part
(each gather is a collective call) and rank 0 alone keeping the result, on the host:
- the weights, after every change, for publishing to engines and for the HF checkpoint
  (gathered tensor by tensor, so accelerator memory grows by one tensor at most);
- the optimizer state in checkpoints, keyed by parameter name, so a checkpoint does not depend on
  how many ranks wrote it.
"""

from __future__ import annotations

import torch

from orchestrator.contracts.learning import GRPOSettings

# Keys of learner_state.pt: a sharded learner writes the whole optimizer state under its own key,
# so a checkpoint is never loaded into a learner of the other kind by mistake.
WHOLE_OPTIMIZER = "optimizer_by_name"


def fsdp_arguments(config: GRPOSettings) -> dict:
    """GRPOConfig's settings for FSDP2 (transformers passes them to accelerate), or none. GRPOConfig's
    gradient_checkpointing only takes effect in `Trainer.train()`, which the learner never calls:
    turned off here so transformers does not warn about it meeting FSDP."""
    if not config.learner.fsdp:
        return {}
    return {"fsdp": True, "fsdp_config": {"version": 2, "reshard_after_forward": True}, "gradient_checkpointing": False}


def shard_on_cpu(trainer) -> None:
    """accelerate shards only on accelerators: with every rank on CPU (gloo) it would silently fall back
    to DistributedDataParallel. Switching its state to FSDP runs the same FSDP2 code the GPU path runs
    (torch's `fully_shard` supports CPU and gloo), so CPU clusters and the test suite shard too."""
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    accelerator = trainer.accelerator
    if accelerator.is_fsdp2:
        return
    if accelerator.distributed_type != DistributedType.MULTI_CPU:
        raise RuntimeError(f"learner.fsdp needs several learner ranks; accelerate runs as {accelerator.distributed_type}")
    accelerator.state.distributed_type = DistributedType.FSDP
    accelerator.state.fsdp_plugin = FullyShardedDataParallelPlugin(**trainer.args.fsdp_plugin_args)
    trainer.is_fsdp_enabled = True


def reshard(model) -> None:
    """After a forward pass with no backward: FSDP2 leaves the root module's parameters gathered (it
    expects the backward to need them), where the optimizer and torch's state-dict API look for the
    sharded ones."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def whole_weights(model) -> dict[str, torch.Tensor]:
    """Every weight gathered whole, on the host: the state dict on rank 0, empty on the other ranks."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def whole_optimizer_state(model, optimizer) -> dict:
    """The optimizer state gathered whole, keyed by parameter name: on rank 0, empty on the others."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def read_learner_state(path: str) -> dict:
    """learner_state.pt memory-mapped: each rank reads only the parts of the optimizer state it keeps."""
    return torch.load(path, weights_only=True, mmap=True)


def load_whole_optimizer_state(model, optimizer, state: dict) -> None:
    """Every rank takes its shard of a whole optimizer state (`whole_optimizer_state`)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
