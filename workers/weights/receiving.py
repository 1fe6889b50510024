"""The engine's side of the weight transports: what `RolloutEngine` does with the learner's weights.

Buckets fed through the object store or the staging ring (object_store.py, staging.py) are put
together as they arrive (incoming.py) and loaded by vLLM's workers (vllm_worker.py); a LoRA run's
adapter buckets are written where vLLM reads them and replace the adapter served (adapters.py); on the
collective path the bytes come over NCCL, or its CPU stand-in gloo, through vLLM's weight-transfer
engine (nccl.py, gloo.py). Either way generation pauses for the load, keeping the requests in flight,
and resumes after it; a load that fails part-way never resumes (loading.py), and the engine then
refuses to generate.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from orchestrator.contracts.engine_death import engine_death_types
from workers.fences import vllm as fenced_vllm
from workers.weights import adapters
from workers.weights.buckets import WeightBucket, checksum
from workers.weights.delta import REJECTED
from workers.weights.incoming import IncomingWeights
from workers.weights.loading import WeightLoads

FEED_WAIT_S = 60.0  # how long a bucket waits for its load to start (the driver sends the load first)


class EngineWeights:
    def __init__(
        self,
        engine_id: int,
        llm,
        readers: int,
        adapter_config: dict | None,
        adapter_dir: Path,
        keep_kv_cache: bool = False,
    ):
        """`llm`: the engine's vLLM `AsyncLLM`; `readers`: its workers (tensor parallel), each of which
        reads every bucket; `adapter_config`: PEFT's, in a LoRA run (None otherwise), and the adapter is
        written to `adapter_dir`; `keep_kv_cache`: requests in flight keep their KV cache across a load
        (rollout.kv_cache_after_update: keep)."""
        self.engine_id = engine_id
        self.policy_version = 0
        self.lora = None  # the LoRARequest every request carries, once an adapter is loaded
        self.loads = WeightLoads(engine_id, pause=self._pause, resume=llm.resume_generation)
        self._llm = llm
        self._readers = readers
        self._adapter_config = adapter_config
        self._adapter_dir = adapter_dir
        self._incoming: dict[int, IncomingWeights] = {}  # loads under way, by policy version
        self._incoming_changed = asyncio.Event()
        self._ended: set[int] = set()  # versions whose load failed or was aborted: their feeds fail at once
        self._loading = asyncio.Lock()
        self._joining = False  # in the NCCL rendezvous of `join_nccl`
        self._joined = False  # a member of a weight-transfer group (its communicator open)
        self._keep_kv_cache = keep_kv_cache

    @property
    def busy(self) -> bool:
        """Whether a load or an NCCL rendezvous is under way: generation is paused for it, and the sync
        has its own deadline, so an engine process that does not answer meanwhile is not wedged."""
        return self.loads.loading or self._loading.locked() or self._joining

    async def load(
        self, headers: list, version: int, timeout_s: float, patch: dict | None = None, mirror: bool = False
    ) -> tuple[int, str]:
        """Pause, load the buckets `feed` passes on as they arrive, resume; requests in flight
        are kept, not dropped. `headers` are the buckets' `WeightBucket.header()`s, in feeding order;
        no bucket may wait longer than `timeout_s` for the one before it. A load that fails (or whose
        workers disagree) raises `WeightLoadFailedError` and never resumes. In a LoRA run the adapter's
        buckets replace the adapter served (workers/weights/adapters.py). `patch`: the buckets are a
        delta with this manifest (delta.py); a patch the workers reject leaves the model and its version
        as they were, and the checksum returned says why (`REJECTED`). `mirror`: the workers keep a copy of
        dense weights, for the patches that follow."""
        if version in self._ended:  # the driver gave this load up before it arrived
            raise RuntimeError(f"engine {self.engine_id}: the load of policy version {version} was aborted before it began")
        incoming = IncomingWeights(version, headers, timeout_s, readers=self._readers)
        self._incoming[version] = incoming  # before any wait: the first feeds may be here already
        self._incoming_changed.set()
        try:
            if incoming.adapter_count and self._adapter_config is None:
                raise ValueError(f"engine {self.engine_id} was sent a LoRA adapter but was not started for one")

            async def load() -> str:
                if incoming.closed:  # aborted while this load waited for the engine to pause
                    raise RuntimeError(f"engine {self.engine_id}: the load of policy version {version} was aborted")
                message = {**incoming.message, "patch": patch, "mirror": mirror, "version": version} if incoming.ring else None
                base_digest = await self._load_base(message) if message else None
                if base_digest and base_digest.startswith(REJECTED):
                    return base_digest  # nothing was loaded: the model serves on as it was
                adapter_digest = await self._load_adapter(await incoming.adapter()) if incoming.adapter_count else None
                await self._llm.update_weight_version(str(version))  # vLLM stamps the tokens sampled from now on
                return adapters.combined_checksum(base_digest, adapter_digest)

            async with self._loading:  # one load at a time
                self.loads.check()  # a failed engine takes no more loads
                digest = await self.loads.load(version, load)
        except BaseException:
            self._ended.add(version)  # buckets still on their way fail at once
            raise
        finally:
            incoming.close()
            del self._incoming[version]
        if digest.startswith(REJECTED):
            return self.policy_version, digest
        self.policy_version = version
        return version, digest

    async def feed(self, version: int, index: int, bucket: WeightBucket) -> None:
        """Bucket `index` of the load of `version`; returns once it is passed on (the object store may
        free it then)."""
        waited = 0.0
        while version not in self._incoming:  # its `load` call may not have started yet
            if version in self._ended:
                raise RuntimeError(
                    f"engine {self.engine_id}: weight bucket {index} of version {version} came after its load failed"
                )
            if waited >= FEED_WAIT_S:
                raise TimeoutError(
                    f"engine {self.engine_id}: weight bucket {index} of version {version} arrived, but its load_weights "
                    f"call did not within {FEED_WAIT_S:.0f}s"
                )
            self._incoming_changed.clear()
            start = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._incoming_changed.wait(), FEED_WAIT_S - waited)
            waited += time.monotonic() - start
        await self._incoming[version].feed(index, bucket)

    def abort(self, version: int) -> None:
        """Stop the load of `version` (the driver gave it up): it fails, and the engine stays paused. An
        abort that comes before its load fails the load as it arrives. A load that already finished
        stands: the driver aborts every engine when the learner fails at the end of a sync, and a
        learner restarted from a checkpoint sends the same version number again."""
        if version in self._incoming:
            self._incoming[version].close()
        elif version == self.policy_version:
            return
        self._ended.add(version)
        self._incoming_changed.set()  # feeds waiting for the load see it ended

    async def _load_base(self, message: dict) -> str:
        checksums = await self._llm.collective_rpc("load_weight_buckets", args=(message,))
        if len(set(checksums)) != 1:
            raise RuntimeError(f"workers loaded different weights: {checksums}")
        return checksums[0]

    async def _load_adapter(self, buckets: list[WeightBucket]) -> str:
        """Write the adapter where vLLM reads it and load it in place of the one served: one LoRA id for
        the whole run, so requests in flight go on with the new adapter, as with new full weights."""
        from vllm.lora.request import LoRARequest

        digest = checksum(buckets)  # of the bytes received, which are the bytes written
        path = adapters.write_adapter(self._adapter_dir, self._adapter_config, buckets)
        lora = LoRARequest("policy", 1, str(path))
        if not await self._llm.add_lora(LoRARequest("policy", 1, str(path), load_inplace=True)):
            raise RuntimeError(f"vLLM did not load the adapter written to {path}")
        self.lora = lora
        return digest

    async def _pause(self) -> None:
        """`AsyncLLM.pause_generation(mode="keep")` without its closing 20 ms sleep,
        which on CPU was a tenth of every weight sync (workers/fences/vllm.py says why it can go)."""
        await fenced_vllm.pause_keep_requests(self._llm, clear_cache=not self._keep_kv_cache)

    async def join_nccl(self, init_info: dict) -> str | None:
        """Collective path: join the learner's weight-transfer group (blocks until all ranks join). None,
        or why this engine could not join: it keeps its weights and serves on (the driver falls back)."""
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        self._joining = True  # the engine process waits in the rendezvous: not wedged (see `busy`)
        try:
            if self._joined:  # vLLM's NCCL engine replaces its group without closing it: close it first
                self._joined = False
                await self._llm.shutdown_weight_transfer_engine()
            await self._llm.init_weight_transfer_engine(WeightTransferInitRequest(init_info=init_info))
            self._joined = True
        except Exception as error:  # the rendezvous' and vLLM's errors have no common type
            if isinstance(error, engine_death_types()):  # vLLM's engine died: replace it
                raise
            return f"{type(error).__name__}: {error}"
        finally:
            self._joining = False
        return None

    async def receive_nccl(
        self, metadata: dict, version: int, patch: dict | None = None, mirror: bool = False
    ) -> tuple[int, str]:
        """Collective path: the same pause -> load -> resume as `load`, bytes over NCCL or gloo (a receive
        that never completes, because a peer died mid-broadcast, keeps the engine paused). Returns the
        workers' checksum of what they received (gloo), or `nccl.UNVERIFIED`. `patch` and `mirror` as for
        `load` (gloo only: vLLM's NCCL receiver takes no more than its own update info)."""
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        from workers.weights.nccl import UNVERIFIED

        delta = {"patch": patch, "mirror": mirror, "version": version} if patch is not None or mirror else {}

        async def load() -> str:
            await self._llm.start_weight_update()
            await self._llm.update_weights(WeightTransferUpdateRequest(update_info={**metadata, **delta}))
            await self._llm.finish_weight_update()
            checksums = set(await self._llm.collective_rpc("weight_transfer_checksum"))
            if len(checksums) != 1:
                raise RuntimeError(f"workers received different weights: {sorted(map(str, checksums))}")
            digest = checksums.pop() or UNVERIFIED
            if not digest.startswith(REJECTED):
                await self._llm.update_weight_version(str(version))  # vLLM stamps the tokens sampled from now on
            return digest

        digest = await self.loads.load(version, load)
        if digest.startswith(REJECTED):  # the model kept its weights (vLLM put back every layer untouched)
            return self.policy_version, digest
        self.policy_version = version
        return version, digest

    def close(self) -> None:
        """Fail the loads under way (the engine is shutting down)."""
        for incoming in list(self._incoming.values()):
            incoming.close()
