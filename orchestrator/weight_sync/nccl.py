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

    def _open(self, learner, engines: dict[int, object], deadline: float) -> None:
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
        if dead:
            raise RuntimeError(f"engines {sorted(dead)} died while opening the NCCL weight-transfer group")
        self._group = tuple(sorted(engines))

    def learner_replaced(self) -> None:
        """The NCCL group's rank 0 is gone, and with it the group: every engine takes the
        object-store path from now on, as when an engine of the group is lost."""
        self._group = ()

    def sync(self, learner, engines: dict[int, object], version: int) -> SyncReport:
        start = time.monotonic()
        deadline = start + self.timeout_s
        if self._group is None:
            self._open(learner, engines, deadline)
        intact = all(engine_id in engines for engine_id in self._group)
        members = {e: a for e, a in engines.items() if intact and e in self._group}
        others = {e: a for e, a in engines.items() if e not in members}
        nbytes, dead = 0, {}
        if members:
            metadata = self._await({-1: learner.weight_metadata.remote()}, "reading weight metadata", deadline)[0][-1]
            receives = {engine_id: actor.receive_nccl.remote(metadata, version) for engine_id, actor in members.items()}
            receives[-1] = learner.nccl_send.remote(self.bucket_bytes)
            results, dead = self._await(receives, f"NCCL weight sync to version {version}", deadline)
            _, nbytes = results.pop(-1)
            # Engines load NCCL bytes straight into their parameters, so there is no received buffer to
            # checksum: on this path only the policy version is verified.
            self._verify(UNVERIFIED, version, results)
        if others:
            report = self._fallback.sync(learner, others, version)
            nbytes, dead = nbytes or report.bytes, {**dead, **report.dead}
        return SyncReport(version, UNVERIFIED, nbytes, time.monotonic() - start, dead)

