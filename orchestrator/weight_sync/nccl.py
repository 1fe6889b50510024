"""GPU weight transport: vLLM's native NCCL weight-transfer engine, learner as rank 0.

Shares everything else with the CPU path: the same `WeightTransport.sync` contract, deadline and
version stamping, and the same engine-side pause -> load -> resume sequence (see
`RolloutEngine.receive_nccl`). One NCCL group spans the learner (rank 0) and the engines present
at the first sync (engine i with tensor parallelism t holds ranks 1 + i*t .. i*t + t). Only the
metadata (names, dtypes, shapes) travels through Ray; the bytes go over NCCL, packed into
double-buffered chunks by vLLM (workers/weights/nccl.py is the actors' side).

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

from orchestrator.weight_sync.object_store import ObjectStoreTransport
from orchestrator.weight_sync.transport import SyncReport, WeightTransport
from workers.weights.nccl import UNVERIFIED


class NcclTransport(WeightTransport):
    def __init__(self, timeout_s: float, bucket_bytes: int, tensor_parallel_size: int = 1):
        super().__init__(timeout_s, bucket_bytes)
        self.tensor_parallel_size = tensor_parallel_size
        self._group: tuple[int, ...] | None = None  # engine ids the NCCL group was opened for
        self._fallback = ObjectStoreTransport(timeout_s, bucket_bytes)

    def _open(self, learner, engines: dict[int, object], deadline: float) -> dict[int, BaseException]:
        """Open the group for `engines`; returns the engines that failed to join (the group is then
        unusable: NCCL needs every rank)."""
        # Rank 0 (the learner) binds the rendezvous, so it picks the address and port on its own node:
        # an address chosen on the driver's node cannot be bound anywhere else.
        endpoint = self._await({-1: learner.nccl_endpoint.remote()}, "choosing the NCCL rendezvous", deadline)[0][-1]
        address, port = endpoint
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
        joins[-1] = learner.nccl_open.remote(address, port, world_size)
        _, dead = self._await(joins, "opening the NCCL weight-transfer group", deadline)
        return dead

    def learner_replaced(self) -> None:
        """The NCCL group's rank 0 is gone, and with it the group: every engine takes the
        object-store path from now on, as when an engine of the group is lost."""
        self._group = ()

    def sync(self, learner, engines: dict[int, object], version: int) -> SyncReport:
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
            _, sent, failed = self._fallback.sync_by(learner, others, version, deadline)
            nbytes, dead = nbytes or sent, {**dead, **failed}
        return SyncReport(version, UNVERIFIED, nbytes, time.monotonic() - start, dead)

    def _broadcast(self, learner, members: dict[int, object], version: int, deadline: float) -> tuple[int, dict]:
        """One NCCL round to the group's members: (bytes sent, members that failed)."""
        metadata = self._await({-1: learner.weight_metadata.remote()}, "reading weight metadata", deadline)[0][-1]
        receives = {engine_id: actor.receive_nccl.remote(metadata, version) for engine_id, actor in members.items()}
        receives[-1] = learner.nccl_send.remote(self.bucket_bytes)
        results, failed = self._await(receives, f"NCCL weight sync to version {version}", deadline)
        _, nbytes = results.pop(-1)
        # Engines load NCCL bytes straight into their parameters, so there is no received buffer to
        # checksum: on this path only the policy version is verified.
        self._verify(UNVERIFIED, version, results)
        return nbytes, failed
