"""Collective weight transport: vLLM's NCCL weight-transfer engine on GPU, opened with a deadline
(timed_nccl.py), or gloo on CPU (gloo.py); the learner is rank 0.

    learner actor    rendezvous(), CollectiveSender.send(weights)  rank 0 of the group; broadcasts
    engine actor     join_nccl / receive_nccl (receiving.py)        vLLM's receiver, pause -> load -> resume
    driver           NcclTransport                                  opens the group, one deadline per sync

`weight_sync.backend: gloo` runs this same path on CPU: the group is a gloo group on the same
rendezvous, the engines' receiver is vLLM's NCCL engine with a gloo communicator (gloo.py), and
every tensor is checksummed on both sides, so CI exercises the code GPU runs take.

Shares everything else with the object-store path: the same `WeightTransport.sync` contract, deadline
and version stamping, and the same engine-side pause -> load -> resume sequence. One group spans the
learner (rank 0) and the engines of a sync (engine i with tensor parallelism t holds ranks
1 + i*t .. i*t + t). Only the metadata (names, dtypes, shapes) travels through Ray; the bytes go over
the collective, packed into chunks by vLLM's packing, cast to the engines' dtype first when it is known.

An engine admitted on its own (a replacement, `orchestrator scale`) takes its first weights through
the object store; the next sync of every engine finds the group's members changed and opens a new
group for them, as it does after an engine is lost or the learner is replaced.

A member that dies mid-broadcast leaves the learner's NCCL broadcast (and the other members'
receives) blocked for good: vLLM's `PyNcclCommunicator` has no timeout, and its only way out,
`destroy()` (ncclCommAbort), would have to be called from a second thread inside the learner actor.
So the sync raises `LearnerSyncTimeout` at the deadline (the learner is then restarted), and the
engines stuck in it stay paused until they are replaced. Gloo's broadcast fails instead: receivers
left half-loaded are replaced, and those that had received everything reload through the object store.

With `weight_sync.delta` on gloo (delta.py), the learner prepares the round's tensors first
(`prepare_delta`: a patch when every member holds its baseline, else the whole model, since a
broadcast reaches them all), and a member that rejects a patch takes the whole model through the
object store in the same sync.

Written against vLLM 0.32's `vllm.distributed.weight_transfer` API; NCCL itself runs only on
machines with CUDA GPUs (tests marked `gpu`), gloo everywhere.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from orchestrator.contracts.engine_death import reason
from workers.weights.delta import DeltaBook, figures, rejections
from workers.weights.object_store import ObjectStoreTransport
from workers.weights.rounds import await_round, verify
from workers.weights.transport import SyncReport, WeightTransport

log = logging.getLogger("orchestrator.weights")  # the driver's log (orchestrator/log.py)
UNVERIFIED = "unverified"  # the checksum an NCCL load reports: vLLM's receiver hashes nothing
OPEN_TIMEOUT_S = 60.0  # the most a rank waits for the others at a group's opening (a quarter of the sync's deadline)
OPEN_MARGIN_S = 15.0  # the driver waits this much past it (at most as long again) for every rank's answer


# Learner side (inside the learner actor).


def rendezvous() -> tuple[str, int]:
    """The address and a free port where rank 0 (this process) will listen for the group."""
    import socket

    import ray

    with socket.socket() as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    return ray.util.get_node_ip_address(), port


class CollectiveSender:
    """Learner side (rank 0) of the weight-transfer group; lives inside the learner actor. `backend`:
    "nccl" (vLLM's communicator on this GPU) or "gloo" (gloo.py)."""

    def __init__(self, backend: str, address: str, port: int, world_size: int, timeout_s: float):
        self.backend = backend
        if backend == "gloo":
            from workers.weights import gloo

            self.group = gloo.open_group(address, port, 0, world_size, timeout_s)
        else:
            from workers.weights import timed_nccl

            self.group = timed_nccl.open_group(address, port, 0, world_size, timeout_s)

    def send(self, named_tensors, bucket_bytes: int) -> str:
        """Broadcast (name, tensor) pairs; the checksum of what was sent (NCCL: `UNVERIFIED`). A tensor
        elsewhere than this GPU (a sharded learner's rank 0 holds the gathered weights on the host) is
        copied to it as it is packed."""
        if self.backend == "gloo":
            from workers.weights.gloo import send_packed

            return send_packed(self.group, named_tensors, bucket_bytes)
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
        return UNVERIFIED

    def close(self) -> None:
        self.group.destroy()


def cast(named_tensors, dtype: str | None):
    """The weights as the engines hold them, one at a time: floating-point tensors in the engines' dtype
    (`rollout.weight_dtype`) when it is known, so an fp32 learner sends bf16 engines half the bytes."""
    import torch

    target = getattr(torch, dtype) if dtype is not None else None
    for name, tensor in named_tensors:
        yield name, tensor.to(target) if target is not None and tensor.is_floating_point() else tensor


def metadata(named_tensors, dtype: str | None = None) -> dict:
    """The per-round update info vLLM's NCCL receiver expects, for the tensors `cast` yields."""
    names, dtypes, shapes = [], [], []
    for name, tensor in named_tensors:
        names.append(name)
        sent = dtype if dtype is not None and tensor.is_floating_point() else str(tensor.dtype).removeprefix("torch.")
        dtypes.append(sent)
        shapes.append(list(tensor.shape))
    return {"names": names, "dtype_names": dtypes, "shapes": shapes}


def chunk_bytes(metadata: dict, bucket_bytes: int) -> int:
    """A group's packed chunk: `weight_sync.bucket_mb`, or the largest tensor if it is larger, so that no
    tensor is packed alone past the buffer (vLLM then warns and copies it once more: a 1B model's
    embedding is 0.6 GB against 64 MB buckets)."""
    import math

    import torch

    sizes = [
        math.prod(shape) * getattr(torch, dtype).itemsize for dtype, shape in zip(metadata["dtype_names"], metadata["shapes"])
    ]
    return max([bucket_bytes, *sizes])


# Driver side.
class NcclTransport(WeightTransport):
    collective = True

    def __init__(
        self,
        timeout_s: float,
        bucket_bytes: int,
        tensor_parallel_size: int = 1,
        dtype: str | None = None,
        backend: str = "nccl",
        delta: DeltaBook | None = None,
    ):
        """`dtype`: the engines' weight dtype, if known: the collective and the object-store fallback
        carry the weights in it. `backend`: "nccl", or "gloo" (its CPU stand-in, gloo.py). `delta`: sync
        by patches after a dense anchor (delta.py; gloo only), the fallback keeping the same book."""
        super().__init__(timeout_s, bucket_bytes)
        self.tensor_parallel_size = tensor_parallel_size
        self.dtype = dtype
        self.backend = backend
        self.label = "NCCL" if backend == "nccl" else backend  # in messages
        self._group: tuple[int, ...] | None = None  # engine ids of the open group; None: open one at the next sync
        self._unopened: tuple[int, ...] | None = None  # engine ids a group failed to open for
        self._chunk_bytes = bucket_bytes  # the open group's packed chunk (`chunk_bytes`)
        self.delta = delta
        self._figures: dict | None = None  # the last broadcast's delta figures (SyncReport.delta)
        self._fallback = ObjectStoreTransport(timeout_s, bucket_bytes, dtype, delta)

    def _open(self, learner, engines: dict[int, object], deadline: float) -> tuple[bool, dict[int, BaseException]]:
        """Open a group for `engines`: (whether it opened, the engines that did not answer in time). Every
        rank waits for the others at most `join_s`, the driver a margin longer, so it reads each side's own
        error; the rest of the sync's deadline is left for the weights (through the object store if this fails)."""
        # Rank 0 (the learner) binds the rendezvous, so it picks the address and port on its own node:
        # an address chosen on the driver's node cannot be bound anywhere else.
        endpoint = learner.nccl_endpoint.remote()
        address, port = await_round("choosing the weight-transfer rendezvous", deadline, self.timeout_s, {}, endpoint).learner
        described = learner.weight_metadata.remote(self.dtype)
        self._chunk_bytes = chunk_bytes(
            await_round("reading weight metadata", deadline, self.timeout_s, {}, described).learner, self.bucket_bytes
        )
        world_size = 1 + len(engines) * self.tensor_parallel_size
        join_s = min(OPEN_TIMEOUT_S, self.timeout_s / 4)
        info = {"master_address": address, "master_port": port, "world_size": world_size, "packed": True}
        info["packed_buffer_size_bytes"] = self._chunk_bytes
        info["timeout_s"] = join_s  # every rank gives up at it (rendezvous.py), the learner too
        joins = {
            engine_id: actor.init_nccl.remote({**info, "rank_offset": 1 + index * self.tensor_parallel_size})
            for index, (engine_id, actor) in enumerate(sorted(engines.items()))
        }
        opened = learner.nccl_open.remote(self.backend, address, port, world_size, join_s)
        limit = join_s + min(OPEN_MARGIN_S, join_s)
        what = f"opening the {self.label} weight-transfer group"
        done = await_round(what, min(deadline, time.monotonic() + limit), self.timeout_s, joins, opened, f"{limit:.0f}s")
        failures = {f"engine {e}": error for e, error in sorted(done.engines.items()) if error}
        failures.update({"the learner": done.learner} if done.learner else {})
        failures.update({f"engine {e}": reason(error) for e, error in sorted(done.dead.items())})
        if failures:
            said = "; ".join(f"{who}: {error}" for who, error in failures.items())
            log.warning(f"{what} failed ({said}); this sync goes through the object store")
        return not failures, done.dead

    def learner_replaced(self) -> None:
        """The group's rank 0 is gone, and with it the group: the next sync opens a new one."""
        self._group = None
        self._fallback.learner_replaced()

    def sync(self, learner, engines: dict[int, object], version: int, adapter_only: bool = False) -> SyncReport:
        if adapter_only:  # factory.py gives a LoRA run the object store
            raise ValueError("the collective transport sends whole models; a LoRA run syncs through the object store")
        start = time.monotonic()
        deadline = start + self.timeout_s
        dead: dict[int, BaseException] = {}
        checksum, nbytes = "", 0
        try:
            members = self._members(learner, engines, deadline, dead)
            if members:
                checksum, nbytes, failed = self._broadcast(learner, members, version, deadline)
                dead.update(failed)
                if failed:
                    self._group = None  # a member is gone: the next sync opens a group without it
        except Exception:
            self._group = None  # a rank died or the learner is stuck: this group can never broadcast again
            raise
        if members and checksum:
            return SyncReport(version, checksum, nbytes, time.monotonic() - start, dead, self.backend, self._figures)
        # No group, or its broadcast failed part-way (a gloo member died): the engines left take the object store.
        others = {e: a for e, a in engines.items() if e not in dead}
        if not others:
            return SyncReport(version, "", 0, time.monotonic() - start, dead, "none")
        if self.delta is not None:
            report = self._fallback.sync_delta_by(learner, others, version, deadline)
            return dataclasses.replace(report, dead={**dead, **report.dead}, seconds=time.monotonic() - start)
        loaded, stored, sent, failed = self._fallback.sync_by(learner, others, version, deadline)
        # `loaded`: the learner's own count, if it is ahead (object_store.py)
        return SyncReport(loaded, stored, sent, time.monotonic() - start, {**dead, **failed}, "object_store")

    def for_joining(self) -> WeightTransport:
        """An engine admitted on its own takes its first weights through the object store; the next sync
        of every engine opens a group that includes it."""
        return self._fallback

    def _members(self, learner, engines: dict[int, object], deadline: float, dead: dict) -> dict[int, object]:
        """The engines this sync broadcasts to: the open group's, or a new group's when its members changed."""
        current = tuple(sorted(engines))
        if not current:
            return {}
        if self._group != current:
            if self._unopened == current:  # it failed to open for these engines: not again until they change
                return {}
            self._group = None
            opened, failed = self._open(learner, engines, deadline)
            dead.update(failed)
            if not opened:
                self._unopened = current
                return {}
            self._group = current
        return dict(engines)

    def _broadcast(self, learner, members: dict[int, object], version: int, deadline: float) -> tuple[str, int, dict]:
        """One collective round to the group's members: (checksum, bytes sent, members that failed); an
        empty checksum if the learner's broadcast failed, when no member's load is to be trusted."""
        if self.delta is not None:
            return self._broadcast_delta(learner, members, version, deadline)
        described = learner.weight_metadata.remote(self.dtype)
        metadata = await_round("reading weight metadata", deadline, self.timeout_s, {}, described).learner
        receives = {engine_id: actor.receive_nccl.remote(metadata, version) for engine_id, actor in members.items()}
        sent = learner.nccl_send.remote(self._chunk_bytes, self.dtype)
        done = await_round(f"{self.label} weight sync to version {version}", deadline, self.timeout_s, receives, sent)
        checksum, nbytes = done.learner
        if checksum is None:  # the learner's broadcast failed (gloo): nothing received can be trusted
            self._group = None
            return "", 0, done.dead
        verify(checksum, version, done.engines)  # NCCL: the versions alone (vLLM's receiver hashes nothing)
        return checksum, nbytes, done.dead

    def _broadcast_delta(self, learner, members: dict[int, object], version: int, deadline: float) -> tuple[str, int, dict]:
        """`_broadcast` of a delta sync: the patch when every member holds the learner's baseline, else (a
        broadcast reaches them all) the dense weights as the anchor; members that reject a patch get the
        dense weights through the object store, in the same sync."""
        _, dense, _ = self.delta.split(members)
        resyncs = self.delta.dense_resyncs
        prepared = learner.prepare_delta.remote(self.dtype, bool(dense), version)
        metadata, version, manifest = await_round("preparing a weight patch", deadline, self.timeout_s, {}, prepared).learner
        receives = {
            engine_id: actor.receive_nccl.remote(metadata, version, manifest, True) for engine_id, actor in members.items()
        }
        sent = learner.nccl_send.remote(self._chunk_bytes, None, True)
        done = await_round(f"{self.label} weight sync to version {version}", deadline, self.timeout_s, receives, sent)
        checksum, nbytes = done.learner
        if checksum is None:  # the learner's broadcast failed (gloo): nothing received can be trusted
            self._group = None
            return "", 0, done.dead
        checksum = manifest["checksum"] if manifest else checksum
        rejected = rejections(done.engines, version)
        accepted = {e: report for e, report in done.engines.items() if e not in rejected}
        verify(checksum, version, accepted)
        if manifest:
            self.delta.patched(version, accepted, rejected)
        else:
            self.delta.anchored(version, accepted, everyone=True)  # a broadcast reaches every engine of the sync
        self.delta.forget(done.dead)
        self._figures = figures(manifest, nbytes, self.delta.dense_resyncs - resyncs)
        if not rejected:
            return checksum, nbytes, done.dead
        resync = self._fallback.sync_delta_by(learner, {e: members[e] for e in rejected}, version, deadline)
        return checksum, nbytes + resync.bytes, {**done.dead, **resync.dead}
