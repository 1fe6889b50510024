"""The TCP rendezvous where the ranks of a weight-transfer group meet (vLLM's `StatelessProcessGroup`,
rank 0 listening), with a deadline. vLLM 0.32 opens its NCCL group on a store that waits 300 s for
every rank whatever its caller's deadline; both collective paths (timed_nccl.py, gloo.py) open theirs
here, so a rank that never comes fails the open on every side at the deadline, and the learner actor
is free again for the object-store fallback."""

from __future__ import annotations

import math


def rendezvous(address: str, port: int, rank: int, world_size: int, timeout_s: float, label: str):
    """Join the rendezvous at `address:port` as `rank`; waits at most `timeout_s` for every rank. `label`
    names the group in the error ("gloo", "NCCL")."""
    from vllm.distributed.utils import StatelessProcessGroup

    try:
        return StatelessProcessGroup.create(
            host=address, port=port, rank=rank, world_size=world_size, store_timeout=max(1, math.ceil(timeout_s))
        )
    except Exception as error:  # torch's store errors name neither the group nor the wait
        raise RuntimeError(
            f"rank {rank} of the {label} weight-transfer group at {address}:{port} (world size {world_size}) did not "
            f"meet the other ranks within {timeout_s:.0f}s: {type(error).__name__}: {error}"
        ) from error
