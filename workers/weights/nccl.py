"""GPU weight transport: vLLM's native NCCL weight-transfer engine, learner as rank 0.

    learner actor    rendezvous(), NcclSender.send(weights)     rank 0 of the group; broadcasts
    engine actor     init_nccl / receive_nccl (receiving.py)    vLLM's receiver, pause -> load -> resume
    driver           NcclTransport                               opens the group, one deadline per sync

Shares everything else with the CPU path: the same `WeightTransport.sync` contract, deadline and
version stamping, and the same engine-side pause -> load -> resume sequence. One NCCL group spans
the learner (rank 0) and the engines present at the first sync (engine i with tensor parallelism t
holds ranks 1 + i*t .. i*t + t). Only the metadata (names, dtypes, shapes) travels through Ray; the
bytes go over NCCL, packed into double-buffered chunks by vLLM.

Engines that join later (replacements, `orchestrator scale`) take the object-store path, which
works on GPUs too. Once a group member is gone the group cannot broadcast any more (NCCL needs
every rank), so from then on every engine takes the object-store path: slower, never wrong.

A member that dies mid-broadcast leaves the learner's broadcast (and the other members' receives)
blocked for good: vLLM's `PyNcclCommunicator` has no timeout, and its only way out, `destroy()`
(ncclCommAbort), would have to be called from a second thread inside the learner actor. So the
sync raises `LearnerSyncTimeout` at the deadline (the learner is then restarted), the group is
given up, and the engines stuck in it stay paused until they are replaced.

Written against vLLM 0.32's `vllm.distributed.weight_transfer` API; exercised only on machines
with CUDA GPUs (tests marked `gpu`).
"""

from __future__ import annotations

import time

from workers.weights.object_store import ObjectStoreTransport
from workers.weights.rounds import await_round, verify
from workers.weights.transport import SyncReport, WeightTransport

UNVERIFIED = "unverified"  # the checksum an NCCL load reports: no received buffer to hash


# Learner side (inside the learner actor).


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


# Driver side.
class NcclTransport(WeightTransport):
    def __init__(self, timeout_s: float, bucket_bytes: int, tensor_parallel_size: int = 1, dtype: str | None = None):
        """`dtype`: the engines' weight dtype, if known, for the object-store fallback (NCCL sends the
        learner's tensors as they are)."""
        super().__init__(timeout_s, bucket_bytes)
        self.tensor_parallel_size = tensor_parallel_size
        self._group: tuple[int, ...] | None = None  # engine ids the NCCL group was opened for
        self._fallback = ObjectStoreTransport(timeout_s, bucket_bytes, dtype)

    def _open(self, learner, engines: dict[int, object], deadline: float) -> dict[int, BaseException]:
        """Open the group for `engines`; returns the engines that failed to join (the group is then
        unusable: NCCL needs every rank)."""
        # Rank 0 (the learner) binds the rendezvous, so it picks the address and port on its own node:
        # an address chosen on the driver's node cannot be bound anywhere else.
        endpoint = learner.nccl_endpoint.remote()
        address, port = await_round("choosing the NCCL rendezvous", deadline, self.timeout_s, {}, endpoint).learner
        world_size = 1 + len(engines) * self.tensor_parallel_size
        joins = {
            engine_id: actor.init_nccl.remote(
                {
                    "master_address": address,
                    "master_port": port,
                    "rank_offset": 1 + index * self.tensor_parallel_size,
                    "world_size": world_size,
                    "packed": True,
                    "packed_buffer_size_bytes": self.bucket_bytes,
                }
            )
            for index, (engine_id, actor) in enumerate(sorted(engines.items()))
        }
        opened = learner.nccl_open.remote(address, port, world_size)
        return await_round("opening the NCCL weight-transfer group", deadline, self.timeout_s, joins, opened).dead

    def learner_replaced(self) -> None:
        """The NCCL group's rank 0 is gone, and with it the group: every engine takes the
        object-store path from now on, as when an engine of the group is lost."""
        self._group = ()

    def sync(self, learner, engines: dict[int, object], version: int, adapter_only: bool = False) -> SyncReport:
        if adapter_only:  # factory.py gives a LoRA run the object store
            raise ValueError("the NCCL transport sends whole models; a LoRA run syncs through the object store")
        start = time.monotonic()
        deadline = start + self.timeout_s
        dead: dict[int, BaseException] = {}
        try:
            if self._group is None:
                dead = self._open(learner, engines, deadline)
                self._group = () if dead else tuple(sorted(engines))
            engines = {e: a for e, a in engines.items() if e not in dead}
            intact = all(engine_id in engines for engine_id in self._group)
            members = {e: a for e, a in engines.items() if intact and e in self._group}
            nbytes = 0
            if members:
                nbytes, failed = self._broadcast(learner, members, version, deadline)
                dead.update(failed)
                if failed:
                    self._group = ()  # a member is gone: the next round would wait for it forever
        except Exception:
            self._group = ()  # a rank died or the learner is stuck: the group can never broadcast again
            raise
        others = {e: a for e, a in engines.items() if e not in members}
        if others:
            loaded, _, sent, failed = self._fallback.sync_by(learner, others, version, deadline)
            version = version if members else loaded  # the learner's own count, if ahead (object_store.py)
            nbytes, dead = nbytes or sent, {**dead, **failed}
        return SyncReport(version, UNVERIFIED, nbytes, time.monotonic() - start, dead)

    def _broadcast(self, learner, members: dict[int, object], version: int, deadline: float) -> tuple[int, dict]:
        """One NCCL round to the group's members: (bytes sent, members that failed)."""
        described = learner.weight_metadata.remote()
        metadata = await_round("reading weight metadata", deadline, self.timeout_s, {}, described).learner
        receives = {engine_id: actor.receive_nccl.remote(metadata, version) for engine_id, actor in members.items()}
        sent = learner.nccl_send.remote(self.bucket_bytes)
        done = await_round(f"NCCL weight sync to version {version}", deadline, self.timeout_s, receives, sent)
        _, nbytes = done.learner
        # Engines load NCCL bytes straight into their parameters, so there is no received buffer to
        # checksum: on this path only the policy version is verified.
        verify(UNVERIFIED, version, done.engines)
        return nbytes, done.dead
