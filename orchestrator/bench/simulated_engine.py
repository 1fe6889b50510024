"""A simulated rollout engine: continuous batching under a token-timing model, in virtual seconds.

It lets the driver side (dispatch, batch assembly, rewards) be measured at hundreds of engines on
a laptop: the engine does no arithmetic, it only knows when each sample would finish. A plain class
with no Ray in it; `simulated_engines.py` drives many of them on the wall clock behind the real
actor interface, and `orchestrator/bench/simulation.py` replays the same workload in virtual time
to compute the rate the engines alone would reach.

The timing model is vLLM's decode loop seen from outside. Every step decodes one token of every
running sample and takes `step_base_s + step_per_sample_s x running samples`. A new group first
prefills its prompt once (its samples share it), during which the engine decodes nothing. A
sample's length is drawn from a geometric distribution (a constant chance of EOS per token), capped
at the request's `max_tokens`, and seeded by (sampling seed, group id, sample index): the same
group gets the same lengths on any engine, in the Ray run and in the replay alike.
"""

from __future__ import annotations

import heapq
import math
import random

from pydantic import Field

from orchestrator.contracts.strict import StrictModel


class TokenTiming(StrictModel):
    """How long a simulated engine takes. The defaults make a group of 8 take a few seconds, as
    on a GPU engine serving a large model; the Ray per-call cost is then as small, relative to
    the work, as it is in a real deployment."""

    step_base_s: float = Field(0.030, gt=0.0, description="Decode step time with one sample running.")
    step_per_sample_s: float = Field(0.00025, ge=0.0, description="Extra decode step time per running sample (batch cost).")
    prefill_per_token_s: float = Field(0.00002, ge=0.0, description="Prefill time per prompt token, once per group.")
    mean_completion_tokens: float = Field(
        64.0, ge=1.0, description="Mean completion length before the max_tokens cap (geometric lengths)."
    )

    def step_s(self, running: int) -> float:
        return self.step_base_s + self.step_per_sample_s * running

    def prefill_s(self, prompt_tokens: int) -> float:
        return self.prefill_per_token_s * prompt_tokens


def completion_lengths(seed: int | None, group_id: int, count: int, mean: float, max_tokens: int) -> list[int]:
    """Each sample's completion length in tokens (at least 1, at most `max_tokens`)."""
    rng = random.Random(f"{seed or 0}:{group_id}")
    keep = 1.0 - 1.0 / mean if mean > 1 else 0.0  # chance that a token is not EOS
    lengths = []
    for _ in range(count):
        extra = int(math.log(1.0 - rng.random()) / math.log(keep)) if keep > 0 else 0
        lengths.append(min(max_tokens, 1 + extra))
    return lengths


class SimulatedEngine:
    """One engine's schedule. The caller owns the clock: `advance(t)` moves the engine to time t and
    returns the groups that finished on the way (with the exact time each finished), `admit` adds a
    group at the engine's current time, and `next_group_done()` says when the next group finishes.

    Every running sample decodes one token per step, so one counter (`decoded`: tokens each running
    sample has gained since the engine started) tells them all apart: a sample admitted at counter
    c with length L finishes when the counter reaches c + L. A heap of those targets makes each
    event O(log running samples).
    """

    def __init__(self, timing: TokenTiming, now: float = 0.0):
        self.timing = timing
        self.clock = now  # the state below is as of this time
        self.decoded = 0.0
        self.prefill_until = now  # prefill in progress: nothing decodes before this
        self._running: list[tuple[float, int, int]] = []  # (counter target, group key, sample index)
        self._left: dict[int, int] = {}  # group key -> samples still running
        self.tokens = 0  # completion tokens admitted so far

    @property
    def running(self) -> int:
        """Samples decoding now (finished samples of an unfinished group no longer count)."""
        return len(self._running)

    @property
    def groups(self) -> int:
        return len(self._left)

    def admit(self, key: int, prompt_tokens: int, lengths: list[int]) -> None:
        """Start a group at the engine's clock; `key` must be new to this engine."""
        if key in self._left:
            raise ValueError(f"group key {key} is already running on this engine")
        self.prefill_until = max(self.clock, self.prefill_until) + self.timing.prefill_s(prompt_tokens)
        for index, length in enumerate(lengths):
            heapq.heappush(self._running, (self.decoded + length, key, index))
        self._left[key] = len(lengths)
        self.tokens += sum(lengths)

    def next_group_done(self) -> float | None:
        """When the next group finishes, if nothing is admitted before then: a walk over the running
        samples in finishing order (the batch shrinks as each one ends), without changing state.
        A host needs one timer per group this way, not one per sample."""
        if not self._running:
            return None
        at, decoded, left = max(self.clock, self.prefill_until), self.decoded, {}
        running = len(self._running)
        for target, key, _ in sorted(self._running):
            at += (target - decoded) * self.timing.step_s(running)
            decoded, running = target, running - 1
            left[key] = left.get(key, self._left[key]) - 1
            if not left[key]:
                return at
        raise AssertionError("every running sample belongs to a running group")

    def advance(self, now: float) -> list[tuple[int, float]]:
        """Move to `now`; returns (group key, time it finished) for every group that finished."""
        if now < self.clock:
            raise ValueError(f"time runs forward only: at {self.clock}, asked for {now}")
        finished = []
        while self._running:
            start = max(self.clock, self.prefill_until)
            step = self.timing.step_s(len(self._running))
            target, key, _ = self._running[0]
            at = start + (target - self.decoded) * step
            if at > now:
                if now > start:
                    self.decoded += (now - start) / step
                break
            heapq.heappop(self._running)
            self.decoded, self.clock = target, at
            self._left[key] -= 1
            if not self._left[key]:
                del self._left[key]
                finished.append((key, at))
        self.clock = now
        return finished
