"""Preemption drains at fleet scale, with and without continuation: a model in virtual time (no Ray, no
engines), for deciding what continuation is worth before a fleet pays for it.

    python -m orchestrator simulate --preemption

A fleet of engines (`capacity` samples in flight each, `engines_per_node` to a node) generates
synchronous steps of `groups` groups of `n` samples whose lengths are long-tailed (log-normal, cut
at `max_tokens`). Every sample in flight takes one token every `token_s` (an engine makes `capacity`
tokens in that time). Nodes are drained at random
(`drains_per_node_hour`, Poisson), each with `notice_s` of notice, and come back as fresh nodes
`replace_s` later. A group is dispatched whole to one engine, as the pool does.

- Without continuation, a drained engine takes no new group and its groups run on until the notice
  ends; a group not finished then is lost and generated again from nothing: every token its samples
  had made is a regenerated token.
- With continuation, a drained engine hands back at once each unfinished sample's tokens; the sample
  continues on another engine from where it stopped, after a prefill of its prompt and tokens so far
  (`prefill_per_token_s`). Nothing is generated twice.

Per run: the mean step time, the engine time spent on regenerated tokens (and its share of all engine
time spent generating), and the tokens continued elsewhere.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import math
import random

from orchestrator.bench.simulated_engine import TokenTiming


@dataclasses.dataclass(frozen=True)
class Fleet:
    engines: int = 256
    engines_per_node: int = 8
    capacity: int = 64  # samples in flight per engine
    n: int = 8  # samples per group
    mean_tokens: float = 4000.0  # before the cut
    max_tokens: int = 16384
    prompt_tokens: int = 512
    timing: TokenTiming = dataclasses.field(default_factory=TokenTiming)  # simulate's; engines run at full occupancy
    drains_per_node_hour: float = 0.05
    notice_s: float = 30.0
    replace_s: float = 180.0
    steps: int = 10
    seed: int = 0

    def length(self, rng: random.Random) -> int:
        """One sample's completion length: log-normal with sigma 1 (a mean of `mean_tokens` before the cut)."""
        return min(self.max_tokens, max(1, int(rng.lognormvariate(math.log(self.mean_tokens) - 0.5, 1.0))))

    @property
    def token_s(self) -> float:
        """A decode step with every slot running: each sample in flight gets one token."""
        return self.timing.step_s(self.capacity)

    @property
    def prefill_per_token_s(self) -> float:
        return self.timing.prefill_per_token_s

    @property
    def groups(self) -> int:
        """A step fills every engine once."""
        return self.engines * self.capacity // self.n


@dataclasses.dataclass
class _Sample:
    group: int
    length: int
    done: int = 0  # tokens made before its current run
    engine: int | None = None  # None: not running (queued, or finished)
    started: float = 0.0
    prefill_s: float = 0.0  # a continued sample's prefill of its context, before its first token

    def made(self, now: float, token_s: float) -> int:
        """Tokens made so far, its current run included."""
        running = max(0, int((now - self.started - self.prefill_s) / token_s))
        return self.done + min(self.length - self.done, running)


def run(fleet: Fleet, continuation: bool) -> dict:
    """One run of `fleet.steps` steps; its figures."""
    return _Run(fleet, continuation).go()


class _Run:
    def __init__(self, fleet: Fleet, continuation: bool):
        self.fleet, self.continuation = fleet, continuation
        self.rng = random.Random(fleet.seed)  # the samples' lengths
        self.drains = random.Random(fleet.seed + 1)  # when, and which node: the same drains with or without continuation
        self.now, self.events, self.order = 0.0, [], itertools.count()
        self.free: dict[int, int] = {}  # serving engines: free slots
        self.running: dict[int, set[int]] = collections.defaultdict(set)  # engine -> its samples in flight
        self.node_of: dict[int, int] = {}  # serving engines' nodes
        self.queue: collections.deque = collections.deque()  # ("group", first sample) or ("sample", index)
        self.samples: list[_Sample] = []  # group g is samples[g * n : (g + 1) * n]
        self.left: dict[int, int] = {}  # group -> samples unfinished
        self.figures = collections.Counter()
        self.engine_ids, self.node_ids = itertools.count(), itertools.count()
        for _ in range(fleet.engines // fleet.engines_per_node):
            self._add_node()
        self._at(self._next_drain(), "drain", None)

    def go(self) -> dict:
        step_times = []
        for _ in range(self.fleet.steps):
            began = self.now
            self._start_step()
            while self.left:
                self._next_event()
            step_times.append(self.now - began)
        # engine time: an engine makes `capacity` tokens every token_s, one for each sample in flight
        generated = self.figures["generated_tokens"] * self.fleet.token_s / self.fleet.capacity
        wasted = self.figures["regenerated_tokens"] * self.fleet.token_s / self.fleet.capacity
        return {
            "step_s": sum(step_times) / len(step_times),
            "drains": self.figures["drains"],
            "regenerated_tokens": self.figures["regenerated_tokens"],
            "continued_tokens": self.figures["continued_tokens"],
            "continued_samples": self.figures["continued_samples"],
            "wasted_engine_hours": wasted / 3600,
            "wasted_share": wasted / generated if generated else 0.0,
        }

    def _start_step(self) -> None:
        fleet = self.fleet
        for _ in range(fleet.groups):
            first = len(self.samples)
            for _ in range(fleet.n):
                self.samples.append(_Sample(first // fleet.n, fleet.length(self.rng)))
            self.left[first // fleet.n] = fleet.n
            self.queue.append(("group", first))
        self._dispatch()

    def _dispatch(self) -> None:
        """Continued samples first, then whole groups, onto serving engines with room (most room first)."""
        for engine in sorted(self.free, key=lambda e: -self.free[e]):
            while self.queue and self.free[engine] >= (1 if self.queue[0][0] == "sample" else self.fleet.n):
                kind, index = self.queue.popleft()
                for i in [index] if kind == "sample" else range(index, index + self.fleet.n):
                    self._begin(i, engine)

    def _begin(self, index: int, engine: int) -> None:
        sample = self.samples[index]
        sample.engine, sample.started = engine, self.now
        self.free[engine] -= 1
        self.running[engine].add(index)
        end = self.now + sample.prefill_s + (sample.length - sample.done) * self.fleet.token_s
        self._at(end, "finish", (index, engine, self.now))

    def _next_event(self) -> None:
        self.now, _, kind, payload = heapq.heappop(self.events)
        if kind == "finish":
            self._finish(*payload)
        elif kind == "drain":
            nodes = sorted(set(self.node_of.values()))
            if nodes:
                self._drain(self.drains.choice(nodes))
            self._at(self._next_drain(), "drain", None)
        elif kind == "deadline":
            for engine in payload:
                self._lose(engine)
        elif kind == "replace":
            self._add_node()
        self._dispatch()

    def _finish(self, index: int, engine: int, started: float) -> None:
        sample = self.samples[index]
        if sample.engine != engine or sample.started != started:  # it moved on, or its group was lost
            return
        self.figures["generated_tokens"] += sample.length - sample.done
        sample.engine = None
        self.running[engine].discard(index)
        if engine in self.free:  # a draining engine takes no more work
            self.free[engine] += 1
        self.left[sample.group] -= 1
        if not self.left[sample.group]:
            del self.left[sample.group]

    def _drain(self, node: int) -> None:
        engines = [engine for engine, on in self.node_of.items() if on == node]
        self.figures["drains"] += 1
        for engine in engines:
            del self.node_of[engine]
            del self.free[engine]  # no new work
            if self.continuation:
                self._hand_back(engine)
        if not self.continuation:
            self._at(self.now + self.fleet.notice_s, "deadline", engines)
        self._at(self.now + self.fleet.replace_s, "replace", None)

    def _hand_back(self, engine: int) -> None:
        """Continuation: each unfinished sample keeps its tokens and goes to the front of the queue."""
        for index in sorted(self.running.pop(engine, ())):
            sample = self.samples[index]
            made = sample.made(self.now, self.fleet.token_s)
            self.figures["generated_tokens"] += made - sample.done
            self.figures["continued_tokens"] += made
            self.figures["continued_samples"] += 1
            sample.done, sample.engine = made, None
            sample.prefill_s = (self.fleet.prompt_tokens + made) * self.fleet.prefill_per_token_s
            self.queue.appendleft(("sample", index))

    def _lose(self, engine: int) -> None:
        """No continuation: the engine is gone, and each group unfinished on it starts again from nothing."""
        n = self.fleet.n
        for group in sorted({self.samples[index].group for index in self.running.pop(engine, ())}):
            for index in range(group * n, (group + 1) * n):
                sample = self.samples[index]
                if sample.engine is None:  # finished
                    self.figures["regenerated_tokens"] += sample.length
                else:
                    made = sample.made(self.now, self.fleet.token_s)
                    self.figures["generated_tokens"] += made - sample.done
                    self.figures["regenerated_tokens"] += made
                self.samples[index] = _Sample(group, sample.length)
            self.left[group] = n
            self.queue.appendleft(("group", group * n))

    def _add_node(self) -> None:
        node = next(self.node_ids)
        for _ in range(self.fleet.engines_per_node):
            engine = next(self.engine_ids)
            self.node_of[engine], self.free[engine] = node, self.fleet.capacity

    def _next_drain(self) -> float:
        nodes = self.fleet.engines // self.fleet.engines_per_node
        return self.now + self.drains.expovariate(self.fleet.drains_per_node_hour * nodes / 3600)

    def _at(self, when: float, kind: str, payload) -> None:
        heapq.heappush(self.events, (when, next(self.order), kind, payload))


def table(rows: list[tuple[int, dict, dict]], fleet: Fleet) -> str:
    """Rows of (engines, without continuation, with it)."""
    lines = [
        f"{fleet.steps} steps per run; each step {fleet.capacity} samples per engine ({fleet.n} per group), lengths "
        f"log-normal with a mean of {fleet.mean_tokens:.0f} tokens cut at {fleet.max_tokens}, {fleet.token_s * 1e3:.0f} ms "
        f"a token; {fleet.drains_per_node_hour} drains per node-hour ({fleet.engines_per_node} engines a node), "
        f"{fleet.notice_s:.0f} s of notice, a new node {fleet.replace_s:.0f} s later",
        "",
        "| engines | continuation | drains | step time (s) | tokens generated again | engine hours wasted | share of generation | tokens continued |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for engines, without, with_ in rows:
        for name, r in (("no", without), ("yes", with_)):
            lines.append(
                f"| {engines} | {name} | {r['drains']} | {r['step_s']:.0f} | {r['regenerated_tokens']:,} | "
                f"{r['wasted_engine_hours']:.2f} | {r['wasted_share']:.1%} | {r['continued_tokens']:,} |"
            )
    return "\n".join(lines)
