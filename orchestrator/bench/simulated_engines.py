"""Simulated engines behind the real actor interface, many to one Ray actor.

256 vLLM actors do not fit on a laptop, and neither do 256 Ray worker processes. So one async actor,
`SimulatedEngines`, hosts many `SimulatedEngine` schedules on the wall clock, and the pool gets one
`SimulatedEngineHandle` per engine whose `.exchange.remote(...)` becomes
`host.exchange.remote(engine_id, ...)`: a real Ray call with a real ObjectRef, so the pool's
dispatch, `ray` waits and engine-death handling are what run and what is measured. Each engine
keeps its groups in the same `GroupQueue` a vLLM actor does (workers/rollout/group_queue.py).

A group's result comes back when the timing model says its last sample finished; its samples are
well formed (token ids, logprobs, text, finish reasons) but their content is synthetic. An engine
killed through the launcher fails its groups with `EngineDeadError`, as a dead vLLM engine does.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import random

from orchestrator.bench.simulated_engine import SimulatedEngine, TokenTiming, completion_lengths
from orchestrator.contracts.engine_death import EngineDiedError
from orchestrator.contracts.fingerprint import TokenizerFingerprint
from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
from orchestrator.contracts.tokenizer import TokenizerBundle
from orchestrator.rollout.launcher import EngineLauncher
from workers.rollout.group_queue import Collected, GroupQueue

CONTENT_TOKENS = 1 << 16  # synthetic token stream that completions are cut from


class EngineDeadError(EngineDiedError):
    """A simulated engine was killed; the pool treats it as a dead vLLM engine."""


class SyntheticContent:
    """Cheap, seeded completion content: each sample is a slice of one precomputed token stream,
    with its logprobs and text, so building a result costs list slicing, not per-token Python."""

    def __init__(self, vocab_size: int, eos_token_id: int, seed: int = 0):
        rng = random.Random(seed)
        self.eos_token_id = eos_token_id
        self.ids = [rng.randrange(vocab_size) for _ in range(CONTENT_TOKENS)]
        self.logprobs = [-rng.expovariate(1.0) for _ in range(CONTENT_TOKENS)]
        self.text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(4 * CONTENT_TOKENS))

    def samples(self, request: GroupRequest, lengths: list[int]) -> list[Sample]:
        """One sample per length: EOS ends it unless it reached `max_tokens` ("length")."""
        base = ((request.sampling.seed or 0) * 0x9E3779B1 + request.group_id * 0x85EBCA77) & 0xFFFFFFFF
        max_tokens = request.sampling.max_tokens
        samples = []
        for index, length in enumerate(lengths):
            start = (base + index * 0x27D4EB2F) % (CONTENT_TOKENS - length)  # a cheap hash, not a Random per group
            ids, logprobs = self.ids[start : start + length], self.logprobs[start : start + length]
            ended_at_eos = length < max_tokens
            if ended_at_eos:
                ids[-1] = self.eos_token_id
            text = self.text[4 * start : 4 * (start + length - ended_at_eos)]
            samples.append(
                Sample(
                    sample_index=index,
                    completion=text,
                    completion_ids=ids,
                    logprobs=logprobs,
                    finish_reason="stop" if ended_at_eos else "length",
                    stop_reason=None,
                    stop_token_id=None,
                )
            )
        return samples


class SimulatedEngines:
    """Created through `ray.remote(SimulatedEngines)` (an async actor); hosts many engines. Every
    method takes the engine id first. Time is the event loop's clock: a timer per engine fires when
    its next group finishes, and that group's `generate` call returns then."""

    def __init__(self, timing: TokenTiming):
        self.timing = timing
        self._engines: dict[int, SimulatedEngine] = {}
        self._queues: dict[int, GroupQueue] = {}
        self._arrived: dict[tuple[int, int], float] = {}  # (engine id, group id) -> when the group reached this host
        self._waiting: dict[int, dict[int, asyncio.Future]] = {}  # engine id -> group key -> future
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._keys = itertools.count()
        self._epoch: float | None = None  # loop time of virtual time 0
        self._content: SyntheticContent | None = None
        self._fingerprints: dict[bytes, TokenizerFingerprint] = {}
        self._late: list[float] = []  # seconds each result was handed back after the model's finish time

    def _now(self) -> float:
        loop = asyncio.get_running_loop()
        if self._epoch is None:
            self._epoch = loop.time()
        return loop.time() - self._epoch

    async def start(self, engine_id: int, tokenizer: TokenizerBundle, capacity: int) -> TokenizerFingerprint:
        """Load the shipped tokenizer (once per host) and report its fingerprint, as a real engine does."""
        key = b"".join(tokenizer.files[name] for name in sorted(tokenizer.files))
        if key not in self._fingerprints:
            self._fingerprints[key] = _fingerprint_of(tokenizer)
        found = self._fingerprints[key]
        if self._content is None:
            self._content = SyntheticContent(found.vocab_size, found.eos_token_id or 0)
            gc.collect()  # the imports above are here to stay: keep the collector off them (orchestrator/rollout/collector.py)
            gc.freeze()
            # This process stands in for a thousand engine processes: it makes and drops millions of
            # objects a minute, none in a reference cycle, so reference counting frees them and the
            # cycle collector only adds pauses. With it on, at 1024 engines this host lagged
            # its own clock by 16-20 ms on average (p99 230-270 ms) and took Ray calls seconds late;
            # off, 1.6 ms (p99 15-21 ms), and its memory grew as much over 50000 groups (to ~670 MB).
            gc.disable()
        self._engines[engine_id] = SimulatedEngine(self.timing, now=self._now())
        self._waiting[engine_id] = {}
        self._queues[engine_id] = GroupQueue(lambda request: self._generate(engine_id, request), capacity)
        return found

    async def exchange(
        self, engine_id: int, batch: int, requests: list[GroupRequest], linger_s: float, refill_at: int | None
    ) -> Collected:
        self.submit(engine_id, batch, requests)
        return await self._queue(engine_id).collect(batch, linger_s, refill_at)

    def submit(self, engine_id: int, batch: int, requests: list[GroupRequest]) -> None:
        arrived = self._now()
        for request in requests:
            self._arrived[engine_id, request.group_id] = arrived
        self._queue(engine_id).submit(batch, requests)

    def withdraw(self, engine_id: int, batch: int) -> list[GroupRequest]:
        return self._queue(engine_id).withdraw(batch)

    def _queue(self, engine_id: int) -> GroupQueue:
        if engine_id not in self._engines:
            raise EngineDeadError(f"simulated engine {engine_id} is not running")
        return self._queues[engine_id]

    async def _generate(self, engine_id: int, request: GroupRequest) -> GroupResult:
        engine = self._engines.get(engine_id)
        if engine is None:
            raise EngineDeadError(f"simulated engine {engine_id} is not running")
        # A group starts once it has arrived and a running one has made room (the engine's clock, which
        # timers move to each finish): the moment a real engine's queue would start it, however late
        # this host, sharing its cores with the driver, gets to it (that lag is reported apart).
        arrived = self._arrived.pop((engine_id, request.group_id), None)
        self._deliver(engine_id, engine.advance(max(engine.clock, self._now() if arrived is None else arrived)))
        lengths = completion_lengths(
            request.sampling.seed,
            request.group_id,
            request.num_generations,
            self.timing.mean_completion_tokens,
            request.sampling.max_tokens,
        )
        key = next(self._keys)
        engine.admit(key, len(request.prompt_ids), lengths)
        finished = self._waiting[engine_id][key] = asyncio.get_running_loop().create_future()
        self._schedule(engine_id)
        await finished
        return GroupResult(
            group_id=request.group_id,
            engine_id=engine_id,
            policy_version=0,
            samples=self._content.samples(request, lengths),
        )

    def _schedule(self, engine_id: int) -> None:
        timer = self._timers.pop(engine_id, None)
        if timer is not None:
            timer.cancel()
        at = self._engines[engine_id].next_group_done()
        if at is not None:
            loop = asyncio.get_running_loop()
            self._timers[engine_id] = loop.call_at(self._epoch + at, self._on_timer, engine_id, at)

    def _on_timer(self, engine_id: int, at: float) -> None:
        """Move the engine to the moment its next group finishes (not to now, which may be later on a
        busy host: a group queued behind it starts at that moment)."""
        self._timers.pop(engine_id, None)
        if engine_id in self._engines:
            self._deliver(engine_id, self._engines[engine_id].advance(max(self._engines[engine_id].clock, at)))
            self._schedule(engine_id)

    def _deliver(self, engine_id: int, finished: list[tuple[int, float]]) -> None:
        now = self._now()
        for key, at in finished:
            self._waiting[engine_id].pop(key).set_result(at)
            self._late.append(now - at)

    def kill(self, engine_id: int) -> None:
        """The engine dies: its groups fail with EngineDeadError and it takes no more."""
        self._engines.pop(engine_id, None)
        self._queues.pop(engine_id, None)
        timer = self._timers.pop(engine_id, None)
        if timer is not None:
            timer.cancel()
        for future in self._waiting.pop(engine_id, {}).values():
            if not future.done():
                future.set_exception(EngineDeadError(f"simulated engine {engine_id} was killed"))

    def shutdown(self, engine_id: int) -> None:
        self.kill(engine_id)

    def policy_version(self, engine_id: int) -> int:
        return 0

    def responsive(self, engine_id: int, timeout_s: float) -> bool:
        return engine_id in self._engines

    def lateness(self) -> list[float]:
        """Seconds between each group's modelled finish and its result being handed to Ray: how far
        this host fell behind its own clock (a busy machine), not something the driver caused."""
        return list(self._late)


def _fingerprint_of(bundle: TokenizerBundle) -> TokenizerFingerprint:
    import tempfile
    from pathlib import Path

    from transformers import AutoTokenizer

    from orchestrator.contracts.fingerprint import fingerprint

    with tempfile.TemporaryDirectory(prefix="simulated-tokenizer-") as folder:
        return fingerprint(AutoTokenizer.from_pretrained(bundle.write_to(Path(folder))))


class _Routed:
    """`handle.method.remote(*args)` as `host.method.remote(engine_id, *args)`."""

    def __init__(self, method, engine_id: int, *bound):
        self._method, self._engine_id, self._bound = method, engine_id, bound

    def remote(self, *args):
        return self._method.remote(self._engine_id, *self._bound, *args)


class SimulatedEngineHandle:
    """What the pool holds for one simulated engine: the `RolloutWorker` methods the pool calls."""

    def __init__(self, host, engine_id: int, tokenizer_ref, capacity: int):
        self.host, self.engine_id = host, engine_id
        self.start = _Routed(host.start, engine_id, tokenizer_ref, capacity)
        self.exchange = _Routed(host.exchange, engine_id)
        self.submit = _Routed(host.submit, engine_id)
        self.withdraw = _Routed(host.withdraw, engine_id)
        self.hand_back = _Routed(host.withdraw, engine_id)  # a simulated engine finishes the groups it began
        self.shutdown = _Routed(host.shutdown, engine_id)
        self.policy_version = _Routed(host.policy_version, engine_id)
        self.responsive = _Routed(host.responsive, engine_id)


class SimulatedLauncher(EngineLauncher):
    """Engines as simulated schedules on `hosts` async actors (engine i on host i mod hosts)."""

    def __init__(self, timing: TokenTiming, hosts: int = 1):
        self.timing = timing
        self.host_count = hosts
        self.hosts: list = []

    def launch(self, engine_id, model, tokenizer_ref, config, device, seed, options):
        import ray

        if not self.hosts:  # Ray is up once the pool launches its first engine
            actor = ray.remote(SimulatedEngines).options(num_cpus=0, max_concurrency=1_000_000)
            self.hosts = [actor.remote(self.timing) for _ in range(self.host_count)]
        return SimulatedEngineHandle(
            self.hosts[engine_id % len(self.hosts)], engine_id, tokenizer_ref, config.max_inflight_samples
        )

    def kill(self, handle) -> None:
        handle.host.kill.remote(handle.engine_id)

    def lateness(self) -> list[float]:
        import ray

        return [late for part in ray.get([host.lateness.remote() for host in self.hosts]) for late in part]

    def close(self) -> None:
        import ray

        for host in self.hosts:
            ray.kill(host)
        self.hosts = []
