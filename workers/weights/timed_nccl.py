"""vLLM's NCCL weight-transfer group, opened with a deadline on both sides (rendezvous.py says why).

The learner (rank 0) opens it with `open_group`; each engine's workers join through
`TimedNcclWeightTransferEngine`, vLLM's NCCL weight-transfer engine with the deadline in its init info,
registered with vLLM's factory as "nccl_timed". Everything after the opening (packed broadcasts,
layer-wise reload) is vLLM's own. Registration happens when this module is imported; the vLLM worker
extension (vllm_worker.py) imports it in every engine process.
"""

from __future__ import annotations

import dataclasses

from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo
from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

from workers.weights.rendezvous import rendezvous

BACKEND = "nccl_timed"


def open_group(address: str, port: int, rank: int, world_size: int, timeout_s: float):
    """vLLM's `PyNcclCommunicator` on this process's current GPU, for `rank` of the group at
    `address:port`; every rank is waited for at most `timeout_s` (no GPU is touched before they met)."""
    import torch
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.weight_transfer.nccl_common import unpinned_nccl_env

    group = rendezvous(address, port, rank, world_size, timeout_s, "NCCL")
    with unpinned_nccl_env():  # as vLLM's own stateless_init_process_group
        return PyNcclCommunicator(group, device=torch.accelerator.current_device_index())


@dataclasses.dataclass(kw_only=True)
class TimedInitInfo(NCCLWeightTransferInitInfo):
    timeout_s: float = 60.0  # for every rank to join


class TimedNcclWeightTransferEngine(NCCLWeightTransferEngine):
    init_info_cls = TimedInitInfo

    def init_transfer_engine(self, init_info: TimedInitInfo) -> None:
        """vLLM's `init_transfer_engine` (the trainer's wire parameters, this worker's rank across
        data-parallel groups), opening the group with the init info's deadline."""
        self.packed = init_info.packed
        self.packed_buffer_size_bytes = init_info.packed_buffer_size_bytes
        self.packed_num_buffers = init_info.packed_num_buffers
        parallel = self.parallel_config
        rank = init_info.rank_offset + parallel.data_parallel_index * parallel.world_size + parallel.rank
        self.model_update_group = open_group(
            init_info.master_address, init_info.master_port, rank, init_info.world_size, init_info.timeout_s
        )


WeightTransferEngineFactory.register_engine(BACKEND, TimedNcclWeightTransferEngine)
