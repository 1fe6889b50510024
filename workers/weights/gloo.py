"""The NCCL weight path's CPU stand-in: the same rendezvous, chunks and vLLM calls, over a gloo group.

    weight_sync.backend: gloo        # the driver's NcclTransport, the learner's CollectiveSender and
                                     # the engines' vLLM weight-transfer engine, as on GPU (nccl.py)

Only the communicator differs. `open_group` joins vLLM's TCP rendezvous (`StatelessProcessGroup`, as
vLLM's NCCL path does) and builds a gloo process group on its store; `GlooCommunicator` has the two
calls of vLLM's `PyNcclCommunicator` the weight path uses (`broadcast`, `destroy`), so the learner's
sender takes it in place of NCCL's. On the engine side `GlooWeightTransferEngine`, a subclass of vLLM's
NCCL weight-transfer engine registered with vLLM's factory as "gloo", opens the same group and
receives without CUDA streams: the chunks are cut where vLLM's packed producer cuts them (`chunks`
mirrors `packed_tensor.pack_tensors`), and each is loaded through the same layer-wise reload. Both
sides checksum every tensor they put on or take off the wire (`Checksum.add_tensor`), so a sync over
the collective path is verified like one over the object store.

Registration happens when this module is imported; the vLLM worker extension (vllm_worker.py) imports
it, so every engine process has the backend before vLLM builds its weight-transfer engine.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Callable, Iterable, Iterator

import torch
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo
from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine, NCCLWeightTransferUpdateInfo
from vllm.distributed.weight_transfer.packed_tensor import pack_tensors, unpack_tensor

from workers.weights.buckets import Checksum
from workers.weights.delta import MIRROR, REJECTED, Manifest, PatchRejected
from workers.weights.rendezvous import rendezvous

BACKEND = "gloo"


class GlooCommunicator:
    """What the weight path calls on vLLM's `PyNcclCommunicator`, on a gloo group."""

    def __init__(self, store, rank: int, world_size: int, timeout_s: float):
        from torch.distributed import PrefixStore, ProcessGroupGloo

        self.rank = rank
        self.world_size = world_size
        self._group = ProcessGroupGloo(PrefixStore("weights/", store), rank, world_size, datetime.timedelta(seconds=timeout_s))

    def broadcast(self, tensor: torch.Tensor, src: int, stream=None) -> None:
        options = torch.distributed.BroadcastOptions()
        options.rootRank = src
        self._group.broadcast([tensor], options).wait()

    def destroy(self) -> None:
        self._group = None


def open_group(address: str, port: int, rank: int, world_size: int, timeout_s: float) -> GlooCommunicator:
    """Join the group at `address:port` (rank 0 listens there); waits at most `timeout_s` for every rank."""
    group = rendezvous(address, port, rank, world_size, timeout_s, "gloo")
    try:
        return GlooCommunicator(group.store, rank, world_size, timeout_s)
    except Exception as error:  # gloo's errors name neither the group nor the wait
        raise RuntimeError(
            f"rank {rank} of the gloo weight-transfer group at {address}:{port} (world size {world_size}) did not "
            f"meet the other ranks within {timeout_s:.0f}s: {type(error).__name__}: {error}"
        ) from error


def send_packed(group, named: Iterable[tuple[str, torch.Tensor]], buffer_bytes: int) -> str:
    """The learner's side: broadcast the tensors in vLLM's packed chunks, one at a time; their checksum."""
    digest = Checksum()

    def linear(item: tuple[str, torch.Tensor]) -> torch.Tensor:
        digest.add_tensor(*item)
        return item[1]

    iterator = iter(named)
    while (chunk := pack_tensors(iterator, linear, buffer_bytes)) is not None:
        group.broadcast(chunk.packed_tensor, src=0)
    return digest.hexdigest()


def chunks(described: Iterable[tuple[str, list[int], torch.dtype]], buffer_bytes: int) -> Iterator[list]:
    """The receiving side's cut of the tensors into chunks: where `pack_tensors` cuts them (after the
    tensor that takes a chunk past `buffer_bytes`). Each chunk: [(name, shape, dtype, bytes), ...]."""
    chunk, size = [], 0
    for name, shape, dtype in described:
        nbytes = math.prod(shape) * dtype.itemsize
        chunk.append((name, shape, dtype, nbytes))
        size += nbytes
        if size > buffer_bytes:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def receive_packed(group, described, buffer_bytes: int, load: Callable[[list], None], digest: Checksum) -> None:
    """The engine's side: receive each chunk into a buffer of its own (the layer-wise reload may keep a
    tensor until the rest of its layer arrives), checksum its tensors and load them."""
    for chunk in chunks(described, buffer_bytes):
        names, shapes, dtypes, sizes = (list(column) for column in zip(*chunk))
        packed = torch.empty(sum(sizes), dtype=torch.uint8)
        group.broadcast(packed, src=0)
        tensors = unpack_tensor(packed, names, shapes, dtypes, sizes)
        for name, tensor in tensors:
            digest.add_tensor(name, tensor)
        load(tensors)


@dataclasses.dataclass(kw_only=True)
class GlooInitInfo(NCCLWeightTransferInitInfo):
    timeout_s: float = 60.0  # for every rank to join, and for each broadcast


@dataclasses.dataclass(kw_only=True)
class GlooUpdateInfo(NCCLWeightTransferUpdateInfo):
    """vLLM's per-round update info, and what a delta sync adds (workers/weights/delta.py)."""

    patch: dict | None = None  # the tensors are a patch with this manifest
    mirror: bool = False  # keep a copy of dense weights, for the patches that follow
    version: int | None = None  # the version a dense load with `mirror` holds


class GlooWeightTransferEngine(NCCLWeightTransferEngine):
    """vLLM's NCCL weight-transfer engine on a gloo group: same init info, same update info, same
    layer-wise reload; no CUDA stream, no accelerator sync. `checksum`: of the last update received."""

    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(self, config, vllm_config, device, model) -> None:
        super().__init__(config, vllm_config, device, model)
        self.checksum: str | None = None

    def init_transfer_engine(self, init_info) -> None:
        """Join (again) the group: a new one replaces the last when the group's members change."""
        self.shutdown()
        self.packed = True  # the learner's sender always packs
        self.packed_buffer_size_bytes = init_info.packed_buffer_size_bytes
        parallel = self.parallel_config
        rank = init_info.rank_offset + parallel.data_parallel_index * parallel.world_size + parallel.rank
        self.model_update_group = open_group(
            init_info.master_address, init_info.master_port, rank, init_info.world_size, init_info.timeout_s
        )

    def receive_weights(self, update_info) -> None:
        if self.model_update_group is None:
            raise RuntimeError("the gloo weight-transfer group is not open (init_weight_transfer_engine first)")
        described = [
            (name, shape, getattr(torch, dtype))
            for name, dtype, shape in zip(update_info.names, update_info.dtype_names, update_info.shapes)
        ]
        from vllm.model_executor.model_loader.mtp_validation import disable_mtp_completeness_check

        digest = Checksum()
        self.checksum = None
        with disable_mtp_completeness_check():  # as vLLM's NCCL receiver: a chunk need not hold a whole MTP layer
            if update_info.patch is not None:
                self.checksum = self._receive_patch(described, update_info.patch, digest)
                return
            load = self._recording(self.model.load_weights) if update_info.mirror else self.model.load_weights
            receive_packed(self.model_update_group, described, self.packed_buffer_size_bytes, load, digest)
        if update_info.mirror:
            MIRROR.loaded(update_info.version)
        self.checksum = digest.hexdigest()

    def _receive_patch(self, described, patch: dict, digest: Checksum) -> str:
        """A delta's tensors, applied to this worker's copy of its weights and checked before the model
        loads every weight from it; the manifest's checksum, or why the patch was rejected (nothing loaded)."""
        received = []
        receive_packed(self.model_update_group, described, self.packed_buffer_size_bytes, received.extend, digest)
        try:
            weights = MIRROR.apply(Manifest.from_dict(patch), received)
        except PatchRejected as why:
            return REJECTED + str(why)
        self.model.load_weights(weights)
        return patch["checksum"]

    @staticmethod
    def _recording(load: Callable[[list], None]) -> Callable[[list], None]:
        """`load`, keeping what it loads as the worker's copy of its weights (MIRROR)."""
        MIRROR.start()

        def recorded(tensors: list) -> None:
            MIRROR.keep(tensors)
            load(tensors)

        return recorded


WeightTransferEngineFactory.register_engine(BACKEND, GlooWeightTransferEngine)
