"""`EngineFleet`: the rollout engines' lifecycle. Start, admit, replace, resize, drain, stop.

Every engine is a Ray actor (or a simulated stand-in) started by a launcher (launcher.py) in its
own placement group, or colocated in a learner worker's bundle (placement/colocation.py), and one
record with one lifecycle state (lifecycle.py: starting, serving, draining, stopping, gone). An engine
is *admitted*, and only then serves, once the fingerprint of the
tokenizer its vLLM loaded equals the canonical one and `on_engine_ready` (the training loop: load
the current weights) has run. A dead engine is dropped and replaced in the background, up to
`rollout.max_restarts`; resizing adds engines or drains the newest ones, which hand their groups back
first. What runs on the engines is the pool's business (pool.py); this file only keeps the set.
A killed engine's processes leave shared memory behind; it is removed on the engine's node
(`launcher.clean_up`), so replacing engines for days does not fill /dev/shm.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

from orchestrator.contracts.engine_death import reason
from orchestrator.contracts.errors import LearnerDiedError, RunError, UserError
from orchestrator.contracts.fingerprint import differences, fingerprint
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.tokenizer import TokenizerBundle, bundle_tokenizer
from orchestrator.log import log
from orchestrator.placement.labels import ROLE_LABEL, ROLLOUT_RESOURCE, ROLLOUT_ROLE
from orchestrator.rollout.collector import freeze_startup_objects, unfreeze
from orchestrator.rollout.cpu_cores import CoreSlots
from orchestrator.rollout.launcher import CLEAN_UP_TIMEOUT_S, ActorLauncher, EngineLauncher
from orchestrator.rollout.lifecycle import Engine, EngineRecords, Life

STOP_TIMEOUT_S = 30.0  # an engine told to stop gets this long to close its vLLM engine, then is killed
CLEAN_UP_WAIT_S = CLEAN_UP_TIMEOUT_S + 30  # a clean-up task may first wait for a Ray worker to run it


class TokenizerMismatchError(UserError):
    """An engine loaded a tokenizer that is not the canonical one."""


class EngineFailedError(RunError):
    """Engines failed to start, or none is left to generate."""


class EngineFleet:
    def __init__(
        self,
        cluster,
        model: str | None,
        tokenizer,
        config: RolloutConfig,
        seed: int = 0,
        engine_files: TokenizerBundle | None = None,
        launcher: EngineLauncher | None = None,
        learner_cores: int = 0,
        name: str | None = None,
        colocation=None,
    ):
        """`cluster` is where engines go (orchestrator.launch.Cluster: placement and device).
        `tokenizer` is the canonical tokenizer object; `model` a path or name, or None when the
        engines take their weights from a learner (`engine_files` then carries the learner's config.json
        beside the tokenizer, and `on_engine_ready` must load the weights). `engine_files` is what is
        shipped to the engines (default: the canonical tokenizer's files).
        `launcher` starts the engines (default: one vLLM `RolloutWorker` actor each). `learner_cores`: on a
        one-node CPU cluster, the node's last cores kept for a learner that trains while engines generate.
        `name`: the engines are Ray actors named `<name>-engine-<id>` (a judge's pool names its engines
        after the judge); None: unnamed. `colocation` (vllm_mode colocate; placement/colocation.py): each
        engine takes a free slot, the GPU of a learner worker, and a replacement the slot its engine left."""
        self.cluster = cluster
        self.model = model
        self.launcher = launcher or ActorLauncher()
        self.config = config
        self.seed = seed
        self.name = name
        self.expected = fingerprint(tokenizer)
        self.bundle = engine_files or bundle_tokenizer(tokenizer)
        self.records = EngineRecords()  # every engine not gone, each in one state (lifecycle.py)
        self.restarts = 0
        self.drained = 0  # engines taken out of service because Ray was draining their node
        self.on_engine_ready: Callable[[int, object], None] | None = None  # set by training: sync weights
        self._next_id = 0
        self._bundle_ref = None
        self.colocation = colocation
        self._cores = _core_slots(cluster, config, learner_cores)  # CPU engines of a one-node cluster: whose cores are whose
        self._clean_ups: list = []  # ObjectRefs of clean-ups still running (launcher.clean_up)

    @property
    def actors(self) -> dict[int, object]:
        """The engines that hold or take groups (serving or draining): engine id -> actor. Read only."""
        return self.records.actors

    @property
    def starting(self):
        return self.records.in_state(Life.STARTING)

    @property
    def draining(self):
        return self.records.in_state(Life.DRAINING).keys()

    @property
    def stopping(self):
        return self.records.in_state(Life.STOPPING)

    def size_for(self, model_config: dict, samples_in_flight: int, tokens_per_sample: int) -> None:
        """Size each engine for the run's work, unless the user set these. Its context (`max_model_len`):
        the run's longest prompt plus its completion budget, within the model's own; a model's 32k
        context would otherwise need a KV cache for a 32k-token sequence before the engine starts. Its
        KV cache too: on CPU always, capping the samples an engine holds to what was sized; on GPU while
        that is small, and beside a colocated learner always, holding at once the samples a small cache
        fits (kv_cache.py says why)."""
        from orchestrator.rollout.kv_cache import (
            GPU_SIZED_MAX_BYTES,
            cpu_kv_cache_bytes,
            gpu_kv_cache_bytes,
            gpu_sequences_within,
        )

        update = {}
        if self.config.max_model_len is None:
            declared = model_config.get("text_config", model_config).get("max_position_embeddings")
            update["max_model_len"] = min(tokens_per_sample, declared) if declared else tokens_per_sample
        context = update.get("max_model_len", self.config.max_model_len)
        if self.cluster.device == "cpu" and self.config.kv_cache_memory_bytes is None:
            inflight = min(self.config.max_inflight_samples, samples_in_flight)
            update["max_inflight_samples"] = inflight
            update["kv_cache_memory_bytes"] = max(
                cpu_kv_cache_bytes(model_config, inflight, tokens_per_sample),
                cpu_kv_cache_bytes(model_config, 1, context),  # vLLM refuses to start without room for one sequence
            )
        elif self.config.kv_cache_memory_bytes is None:
            dtype = self.config.weight_dtype(self.cluster.device)
            inflight = min(self.config.max_inflight_samples, samples_in_flight)
            tokens = max(tokens_per_sample, context)
            sized = gpu_kv_cache_bytes(model_config, inflight, tokens, dtype)
            if sized is None and self.colocation is not None:  # never vLLM's start-up profile beside a learner
                inflight = min(inflight, gpu_sequences_within(model_config, tokens, dtype, GPU_SIZED_MAX_BYTES))
                sized = gpu_kv_cache_bytes(model_config, inflight, tokens, dtype, cap=None)
            if sized is not None:
                update.update(max_inflight_samples=inflight, kv_cache_memory_bytes=sized)
        self.config = self.config.model_copy(update=update)

    def start(self) -> EngineFleet:
        """Start every engine and admit them all (each checked, then `on_engine_ready`) or fail."""
        import ray

        from workers.fences import ray as fenced_ray  # noqa: F401  (its release check: now, not mid-run)

        self._bundle_ref = ray.put(self.bundle)
        try:
            for _ in range(self.config.engines):
                self.add_engine()
            self.admit_ready(block=True, strict=True)
        except BaseException:
            self.shutdown()
            raise
        freeze_startup_objects()
        return self

    def add_engine(self) -> int:
        """Start one more engine in the background; it serves once ready and synced."""
        engine_id, self._next_id = self._next_id, self._next_id + 1
        (options, group, slot), config = self._placed(engine_id), self.config
        if self.colocation is not None:  # vLLM takes its share of the GPU's memory, the learner the rest
            config = config.model_copy(update={"gpu_memory_utilization": self.colocation.share})
        if self._cores is not None:
            config = config.model_copy(update={"cpu_threads_bind": self._cores.take(engine_id)})
        if self.name is not None:
            options = {**options, "name": f"{self.name}-engine-{engine_id}"}
        actor = self.launcher.launch(
            engine_id, self.model, self._bundle_ref, config, self.cluster.device, self.seed + engine_id, options
        )
        deadline = time.monotonic() + self.config.startup_timeout_s
        self.records.add(
            Engine(engine_id, actor, waiting=actor.start.remote(), deadline=deadline, placement_group=group, slot=slot)
        )
        return engine_id

    def _placed(self, engine_id: int) -> tuple[dict, object, int | None]:
        """The new engine's actor options, with its own placement group (None locally), or with a free slot
        of the colocation. Never blocks (a replacement must not stall generation): an engine that finds no
        node misses its start deadline and the pool goes on without it."""
        if self.colocation is None:
            gpus = self.config.tensor_parallel_size if self.cluster.device == "cuda" else 0
            options, group = self.cluster.placement.actor_options(ROLLOUT_ROLE, self.config.num_cpus_per_engine, gpus, None)
            return options, group, None
        free = sorted(set(range(self.colocation.slots)) - {engine.slot for engine in self.records})
        if not free:
            raise UserError(
                f"vllm_mode: colocate has room for {self.colocation.slots} engine(s), one per learner worker's GPU; "
                "more engines need vllm_mode: server"
            )
        return self.colocation.engine_options(free[0]), None, free[0]

    def admit_ready(self, block: bool, strict: bool = False) -> list[int]:
        """Admit engines that finished starting. `block` waits until one is admitted (with `strict`,
        the first start: until all are) or none is left starting; `strict` turns any start failure
        into an error instead of running degraded."""
        import ray

        admitted = []
        while self.starting:
            refs = {engine.waiting: engine for engine in self.starting.values()}
            timeout = max(0.0, min(e.deadline for e in refs.values()) - time.monotonic()) if block else 0
            done, _ = ray.wait(list(refs), num_returns=1 if block else len(refs), timeout=timeout)
            for ref in done:
                if self._admit(refs[ref], strict):
                    admitted.append(refs[ref].engine_id)
            for engine_id, engine in list(self.starting.items()):
                if time.monotonic() > engine.deadline:
                    self.kill(engine_id)
                    self._fail_or_warn(
                        strict,
                        f"engine {engine_id} did not start within rollout.startup_timeout_s={self.config.startup_timeout_s}s "
                        f"({self._where_engines_go()})",
                    )
            if not block or (admitted and not strict):
                break
        return admitted

    def _where_engines_go(self) -> str:
        if self.colocation is not None:
            return (
                f"vllm_mode: colocate; its learner worker's GPU must have vllm_gpu_memory_utilization ({self.colocation.share}) "
                "of its memory free"
            )
        return (
            f"placement: {self.cluster.placement.mode}; is a node with {ROLE_LABEL}={ROLLOUT_ROLE} (or the "
            f"{ROLLOUT_RESOURCE} resource) and free resources up?"
        )

    def _admit(self, engine: Engine, strict: bool) -> bool:
        """Serve `engine`, which finished starting, once checked and synced; else it is killed."""
        import ray

        engine_id = engine.engine_id
        try:
            reported = ray.get(engine.waiting)
        except ray.exceptions.RayError as error:
            self.kill(engine_id)
            # One line: the root cause vLLM's processes logged (workers/rollout/start_failure.py).
            self._fail_or_warn(strict, f"engine {engine_id} failed to start: {reason(error)}")
            return False
        try:
            engine.leftovers = self.launcher.leftovers(engine.actor)
        except ray.exceptions.RayError:
            pass  # it died just now: its next call fails and it is replaced then
        problems = differences(self.expected, reported)
        if problems:
            self.kill(engine_id)
            raise TokenizerMismatchError(
                "rollout engines loaded a tokenizer that differs from the canonical one; refusing to generate:\n  "
                + "\n  ".join(f"engine {engine_id}: {line}" for line in problems)
            )
        if self.on_engine_ready is not None:
            try:
                self.on_engine_ready(engine_id, engine.actor)  # current weights before the first request
            except Exception as error:
                self.kill(engine_id)
                if isinstance(error, LearnerDiedError):
                    # The learner is dead or stuck, not this engine: a successor (not counted as a restart)
                    # loads the weights of the learner that replaces it, so the pool keeps its size.
                    self.add_engine()
                    raise
                self._fail_or_warn(strict, f"engine {engine_id} could not load the current weights: {reason(error)}")
                return False
        self.records.move(engine_id, Life.SERVING)
        engine.waiting, engine.deadline = None, math.inf
        engine.node = None if engine.leftovers is None else self.launcher.node(engine.leftovers)
        return True

    def _fail_or_warn(self, strict: bool, message: str) -> None:
        if strict:
            raise EngineFailedError(message)
        log.warning(f"{message}; continuing with {len(self.actors)} engine(s)")

    def engine_died(self, engine_id: int, error: BaseException) -> None:
        """Drop a dead engine and start its replacement (which serves once ready and synced)."""
        engine = self.records.get(engine_id)
        if engine is None or engine.life not in (Life.SERVING, Life.DRAINING):
            return  # already handled for another of its groups
        self.kill(engine_id)
        if engine.life is Life.DRAINING:  # it was leaving anyway
            return
        if self.restarts >= self.config.max_restarts:
            log.warning(f"engine {engine_id} died ({reason(error)}); rollout.max_restarts reached, not replacing it")
            return
        self.restarts += 1
        replacement = self.add_engine()
        log.warning(
            f"engine {engine_id} died ({reason(error)}); its groups go to the {len(self.actors)} live engine(s), "
            f"replacement engine {replacement} is starting"
        )

    def drain_leaving_nodes(self) -> list[int]:
        """Engines on nodes Ray is draining (a preemption notice, idle termination, `ray drain-node`): they
        take no new groups and stop once they hold none (the caller hands their queued groups to others),
        and a replacement starts now, which Ray places on a node not draining. Returns those drained now."""
        from orchestrator.placement.placement import draining_nodes

        serving = self.records.in_state(Life.SERVING)
        if self.colocation is not None or not any(engine.node for engine in serving.values()):
            return []  # colocated: the pair's bundle goes with its node (loop.py)
        leaving = draining_nodes()
        drained = [engine_id for engine_id, engine in serving.items() if engine.node in leaving]
        for engine_id in drained:
            node = self.records.move(engine_id, Life.DRAINING).node
            self.drained += 1
            deadline = leaving[node] - time.time()
            replacement = self.add_engine()
            log.warning(
                f"engine {engine_id} is on node {node[:12]}, which Ray is draining ("
                + (f"deadline in {deadline:.0f}s" if deadline < float("inf") else "no deadline")
                + f"): it takes no new groups, {self._handing_back()}; replacement engine {replacement} is starting"
            )
        return drained

    def resize(self, engines: int) -> None:
        """Grow or shrink to `engines`. New engines start in the background and serve once ready and
        synced; when shrinking, engines still starting are cancelled first, then the newest serving
        engines stop taking groups, hand back those they hold (or finish them: `rollout.continuation`), and stop."""
        if engines < 1:
            raise UserError(f"a pool needs at least 1 engine, asked for {engines}")
        if self.colocation is not None and engines > self.colocation.slots:
            log.warning(
                f"asked for {engines} engines, but vllm_mode: colocate has room for {self.colocation.slots}, one per "
                "learner worker's GPU; keeping that many"
            )
            engines = self.colocation.slots
        if self.colocation is not None:  # a colocated slot is not free until its engine stops: keep draining ones first
            while self.draining and len(self.records.in_state(Life.SERVING)) + len(self.starting) < engines:
                self.records.move(min(self.draining), Life.SERVING)
        serving = sorted(self.records.in_state(Life.SERVING))
        for _ in range(engines - len(serving) - len(self.starting)):
            self.add_engine()
        while self.starting and len(serving) + len(self.starting) > engines:
            self.kill(max(self.starting))
        surplus = serving[engines:] if len(serving) > engines else []
        for engine_id in surplus:
            self.records.move(engine_id, Life.DRAINING)
        if surplus:
            log.info(f"draining engine(s) {surplus}: {self._handing_back()}, then they stop")

    def _handing_back(self) -> str:
        """What becomes of a draining engine's groups, for the line that says it drains."""
        if self.config.continuation:
            return "the groups held go to other engines at once (those under way continue there from their last token)"
        return "queued groups go to other engines, and groups begun finish first"

    def stop_drained(self, busy: set[int]) -> None:
        """Drained engines that hold no group (none in `busy`) stop, without waiting for them to close."""
        for engine_id in sorted(set(self.draining) - busy):
            self.remove_engine(engine_id)

    def remove_engine(self, engine_id: int) -> None:
        """Take an engine out of service and tell it to close its vLLM engine; `finish_stops` kills it
        once it has, or after STOP_TIMEOUT_S (`resize` is the graceful way: it drains first)."""
        engine = self.records.move(engine_id, Life.STOPPING)
        engine.node = None
        if self._cores is not None:  # it generates no more: an engine started meanwhile may take its cores
            self._cores.free(engine_id)
        engine.slot = None  # colocated: a replacement takes its bundle (Ray starts it once this one is gone)
        engine.waiting, engine.deadline = engine.actor.shutdown.remote(), time.monotonic() + STOP_TIMEOUT_S

    def finish_stops(self, timeout_s: float) -> None:
        """Kill the stopping engines that closed, waiting up to `timeout_s` for them, and those out of time."""
        import ray

        if not self.stopping:
            return
        closing = [engine.waiting for engine in self.stopping.values()]
        closed = set(ray.wait(closing, num_returns=len(closing), timeout=timeout_s)[0])
        now = time.monotonic()
        for engine_id, engine in list(self.stopping.items()):
            if engine.waiting in closed or now >= engine.deadline:
                self.kill(engine_id)

    def kill(self, engine_id: int) -> None:
        """The engine is gone, from whatever state: its actor killed, its placement group, cores or
        colocated slot free for the next, and what it left on its node cleaned up in the background."""
        import ray

        engine = self.records.remove(engine_id)
        if engine is None:
            return
        try:
            self.launcher.kill(engine.actor)
        except Exception:  # already gone
            pass
        if engine.placement_group is not None:
            ray.util.remove_placement_group(engine.placement_group)
        if self._cores is not None:
            self._cores.free(engine_id)
        self._clean_up_after(engine.leftovers)

    def _clean_up_after(self, leftovers) -> None:
        """Remove, on its node, what a killed engine's processes left there (shared memory, which
        would fill a small /dev/shm over many replacements). Runs in the background."""
        import ray

        clean_up = None if leftovers is None else self.launcher.clean_up(leftovers)
        if clean_up is None:
            return
        if self._clean_ups:  # forget those that finished
            self._clean_ups = ray.wait(self._clean_ups, num_returns=len(self._clean_ups), timeout=0)[1]
        self._clean_ups.append(clean_up)

    def wait_for_clean_ups(self, timeout_s: float = CLEAN_UP_WAIT_S) -> None:
        """Wait (at most `timeout_s`) for the clean-ups of killed engines to finish."""
        import ray

        if self._clean_ups:
            ray.wait(self._clean_ups, num_returns=len(self._clean_ups), timeout=timeout_s)
        self._clean_ups = []

    def shutdown(self) -> None:
        """Cancel engines still starting, then stop the serving ones and those still closing (given
        STOP_TIMEOUT_S, together, to close their vLLM engines). A starting engine serves nothing yet and
        may be waiting for a node that never comes (a replacement after a node loss): waiting on it
        would stall the end of the run, and cancelling it first keeps it from taking the room the
        others free."""
        for engine_id in list(self.starting):
            self.kill(engine_id)
        for engine_id in list(self.actors):
            self.remove_engine(engine_id)
        self.finish_stops(timeout_s=STOP_TIMEOUT_S)  # together: a lost node's engine costs the timeout once
        for engine_id in list(self.stopping):
            self.kill(engine_id)
        self.wait_for_clean_ups()  # before the driver exits, and Ray with it
        unfreeze()  # collector.py


def _core_slots(cluster, config: RolloutConfig, learner_cores: int) -> CoreSlots | None:
    """Slots of this machine's cores (less the last `learner_cores`) for CPU engines when the cluster is
    this machine alone, unless `rollout.cpu_threads_bind` says otherwise (cpu_cores.py). Engines of
    several vLLM workers (tensor parallel) keep vLLM's own binding, which takes one core list per worker."""
    if config.cpu_threads_bind is not None or config.tensor_parallel_size > 1 or not one_cpu_node(cluster):
        return None
    cores = sorted(os.sched_getaffinity(0))
    return CoreSlots(cores[: len(cores) - learner_cores], config.most_engines())  # slots for engines autoscaling adds too


def one_cpu_node(cluster) -> bool:
    """Whether the cluster is this machine alone, without GPUs: engines and learner share its cores."""
    from orchestrator.placement.placement import one_node

    return cluster.device == "cpu" and cluster.placement.mode == "local" and one_node()
