"""Actor side of the GPU weight transport: vLLM's NCCL weight-transfer engine, learner as rank 0.

`NcclSender` lives in the learner actor and broadcasts the weights; each engine receives them in
`RolloutEngine.receive_nccl`. The driver's side (opening the group, deadlines, the fallback) is
orchestrator/weight_sync/nccl.py. Exercised only on machines with CUDA GPUs (tests marked `gpu`).
"""

from __future__ import annotations

UNVERIFIED = "unverified"  # the checksum an NCCL load reports: no received buffer to hash


def rendezvous() -> tuple[str, int]:
    """The address and a free port where rank 0 (this process) will listen for the group."""
    import socket

    import ray

    with socket.socket() as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    return ray.util.get_node_ip_address(), port


class NcclSender:
    """Learner side (rank 0) of the NCCL group; lives inside the learner actor."""

    def __init__(self, address: str, port: int, world_size: int):
        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        self.group = trainer_init({"master_address": address, "master_port": port, "world_size": world_size})

    def send(self, named_tensors, bucket_bytes: int) -> None:
        """Broadcast (name, tensor) pairs. A tensor elsewhere than this GPU (a sharded learner's rank 0
        holds the gathered weights on the host) is copied to it as it is packed."""
        import torch
        from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_producer

        device = torch.device("cuda", torch.cuda.current_device())
        packed_nccl_broadcast_producer(
            iterator=iter(named_tensors),
            group=self.group,
            src=0,
            post_iter_func=lambda item: item[1].to(device),
            buffer_size_bytes=bucket_bytes,
        )


def metadata(named_tensors) -> dict:
    """The per-round update info vLLM's NCCL receiver expects."""
    names, dtypes, shapes = [], [], []
    for name, tensor in named_tensors:
        names.append(name)
        dtypes.append(str(tensor.dtype).removeprefix("torch."))
        shapes.append(list(tensor.shape))
    return {"names": names, "dtype_names": dtypes, "shapes": shapes}
