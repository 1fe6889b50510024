"""`RolloutWorker`: the Ray actor that owns one `RolloutEngine`. A thin shell; logic lives in engine.py.

It receives the canonical tokenizer as bytes (no shared filesystem assumed), writes it to a
private folder, builds the engine on it, and reports the fingerprint of what vLLM loaded. With
`model=None` the bundle also carries the model's config.json: the engine starts with placeholder
weights and serves only after the learner's weights have been loaded into it, so no node needs
the model files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from orchestrator.contracts.fingerprint import TokenizerFingerprint
from orchestrator.contracts.groups import GroupRequest
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.tokenizer import TokenizerBundle
from workers.rollout import reaper, start_failure
from workers.rollout import shared_memory as shm
from workers.rollout.group_queue import Collected, GroupQueue
from workers.rollout.processes import describe, kill_survivors


class RolloutWorker:
    """Created through `ray.remote(RolloutWorker)`; every method is called remotely."""

    def __init__(
        self, engine_id: int, model: str | None, tokenizer: TokenizerBundle, config: RolloutConfig, device: str, seed: int
    ):
        self.engine_id = engine_id
        self._folder = Path(tempfile.mkdtemp(prefix=f"rollout-{engine_id}-tokenizer-"))
        tokenizer.write_to(self._folder)
        if model is None and not (self._folder / "config.json").is_file():
            raise ValueError("model=None needs the model's config.json in the shipped bundle")
        model_config = Path(model or self._folder) / "config.json"
        if model_config.is_file() and not (self._folder / "config.json").exists():
            # vLLM logs a loud (harmless) error for a tokenizer folder without a model config.
            shutil.copyfile(model_config, self._folder / "config.json")
        self._args = (engine_id, model or str(self._folder), self._folder, config, device, seed, model is None)
        shm.sweep()  # what engines killed with their driver left on this node
        self._shm_before = shm.entries()  # what is in /dev/shm now is not this engine's
        self._claim = None
        self._reaper = None  # reaper.py: ends the vLLM processes if this actor dies (it goes with it)
        self._engine = None
        self._groups: GroupQueue | None = None
        self._logged: dict[int, int] = {}  # where the engine's logs ended when it last served well
        self._tools = None

    async def start(self) -> TokenizerFingerprint:
        """Build the engine (tens of seconds) and return the fingerprint of its tokenizer."""
        from workers.rollout.engine import RolloutEngine
        from workers.tools.runner import RayToolRunner

        self._tools = RayToolRunner(node_id=self.node_id())  # its host actor shares this actor's fate
        if self._reaper is None:  # ends vLLM's processes if this actor dies, even while starting (reaper.py)
            self._reaper = reaper.start(describe([os.getpid()])[0])
        began = start_failure.log_offsets()
        try:
            self._engine = RolloutEngine(*self._args, call_tool=self._tools)
            await self._engine.warm_up()
            capacity = self._args[3].max_inflight_samples
            self._groups = GroupQueue(self._engine.generate, capacity, stop_running=self._engine.hand_back)
            self._logged = start_failure.log_offsets()  # where to look for the cause if it dies (start_failure.py)
        except Exception as error:
            self._clean_up_failed_start()
            cause = start_failure.root_cause(began)
            if cause is None:
                raise
            raise start_failure.EngineStartError(cause) from error
        return self._engine.tokenizer_fingerprint()

    def _clean_up_failed_start(self) -> None:
        """An engine that failed while starting never listed what it would leave (`leftovers`): end the
        processes it started, and remove the entries of vLLM's kinds that appeared in /dev/shm since this
        actor started and that no live process maps (another engine's are mapped by it)."""
        kill_survivors(describe(self._engine_pids()))
        appeared = shm.entries() - self._shm_before
        shm.remove_leftovers([name for name in appeared if name.startswith(shm.VLLM_PREFIXES)], timeout_s=5.0)

    async def exchange(self, batch: int, requests: list[GroupRequest], linger_s: float, refill_at: int | None) -> Collected:
        """Take more groups of driver batch `batch` and hand back those finished (group_queue.py)."""
        self._groups.submit(batch, requests)
        try:
            collected = await self._groups.collect(batch, linger_s, refill_at)
        except Exception as error:
            explained = start_failure.explained_death(error, self._logged)
            if explained is error:
                raise
            raise explained from error
        self._logged = start_failure.log_offsets()
        return collected

    def submit(self, batch: int, requests: list[GroupRequest]) -> None:
        """Take more groups while an `exchange` call is already waiting."""
        self._groups.submit(batch, requests)

    def withdraw(self, batch: int) -> list[GroupRequest]:
        """Give back the queued groups that have not started."""
        return self._groups.withdraw(batch)

    async def hand_back(self, batch: int) -> list[GroupRequest]:
        """Stop serving: give back the queued groups, and stop the running ones, which the waiting `exchange`
        hands back at once with their samples so far (group_queue.py)."""
        return await self._groups.hand_back(batch)

    async def responsive(self, timeout_s: float) -> bool:
        return await self._engine.responsive(timeout_s)

    async def load_weights(
        self, headers: list, version: int, timeout_s: float, patch: dict | None = None, mirror: bool = False
    ) -> tuple[int, str]:
        """Load the learner's weights as `feed_weights` brings them (workers/weights/object_store.py);
        returns (policy version, checksum received) for the provenance check. `patch`: the manifest of a
        delta (workers/weights/delta.py); `mirror`: keep a copy of dense weights for later patches."""
        return await self._engine.weights.load(headers, version, timeout_s, patch, mirror)

    async def feed_weights(self, version: int, index: int, bucket) -> None:
        """One bucket of the load of `version`, read in place from the object store on this node."""
        await self._engine.weights.feed(version, index, bucket)

    def abort_weights(self, version: int) -> None:
        self._engine.weights.abort(version)

    async def init_nccl(self, init_info: dict) -> str | None:
        return await self._engine.weights.join_nccl(init_info)

    async def receive_nccl(self, metadata: dict, version: int, *delta) -> tuple[int, str]:
        """`delta`: (patch manifest, mirror), on a delta sync (workers/weights/delta.py)."""
        return await self._engine.weights.receive_nccl(metadata, version, *delta)

    def policy_version(self) -> int:
        return self._engine.weights.policy_version

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def leftovers(self) -> tuple[list, list[str]]:
        """What killing this engine would leave on its node: its processes (this actor's and vLLM's, with
        their start times: processes.py) and the /dev/shm entries they created (shared_memory.py).
        Asked once the engine is up; also written down on the node, for the next engine to clean up
        if no driver is left to."""
        pids = [os.getpid(), *self._engine_pids()]
        names = sorted({*shm.owned_entries(pids, self._shm_before), *shm.unmapped_entries(self._shm_before)})
        started = describe(pids)
        self._claim = shm.write_claim(started, names)
        return started, names

    def _engine_pids(self) -> list[int]:
        """The processes this actor started for its engine (vLLM's), its reaper left out."""
        reaper_pid = self._reaper.pid if self._reaper is not None else None
        return [pid for pid in shm.process_tree(os.getpid())[1:] if pid != reaper_pid]

    def shutdown(self) -> None:
        if self._tools is not None:
            self._tools.shutdown()
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
        shutil.rmtree(self._folder, ignore_errors=True)
        if self._claim is not None:  # its processes removed their entries as they stopped
            self._claim.unlink(missing_ok=True)
