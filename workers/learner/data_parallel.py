"""A learner process joining the learner's data-parallel group (`learner.workers` > 1).

Every rank joins one torch.distributed group (gloo on CPU, NCCL on GPU) before `GRPOLearner` builds
TRL's trainer: accelerate reads the same environment variables a `torchrun` launch sets, finds the
group already open, and wraps the model in DistributedDataParallel. Rank 0 listens at an address and
port chosen on its own node (`rendezvous` in workers/weights/nccl.py). Under Ray each rank sees only
its own GPU, so its local rank is 0 whatever its global rank.
"""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class DataParallelRank:
    rank: int
    world_size: int
    address: str  # rank 0's node
    port: int
    local_rank: int = 0
    local_world_size: int = 1
    timeout_s: float = 1800.0  # for every rank to arrive, and for each collective call after (learner.collective_timeout_s)


def join(member: DataParallelRank, use_gpu: bool) -> None:
    """Open this process's place in the group; waits up to `member.timeout_s` for every rank to arrive."""
    from datetime import timedelta

    import torch.distributed as dist

    os.environ.update(
        MASTER_ADDR=member.address,
        MASTER_PORT=str(member.port),
        RANK=str(member.rank),
        WORLD_SIZE=str(member.world_size),
        LOCAL_RANK=str(member.local_rank),
        LOCAL_WORLD_SIZE=str(member.local_world_size),
    )
    dist.init_process_group(
        backend="nccl" if use_gpu else "gloo",
        init_method=f"tcp://{member.address}:{member.port}",
        rank=member.rank,
        world_size=member.world_size,
        timeout=timedelta(seconds=member.timeout_s),
    )
