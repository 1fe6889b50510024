"""`Autoscaler`: the rollout pool's size, decided after every step from what the step measured
(`rollout.autoscale`). A plain class: the training loop feeds it each step's timings and applies its
target through the pool's front door (`RolloutPool.resize`, as `python -m orchestrator scale` does).

    scaler = Autoscaler(settings, engines=config.rollout.engines)
    decision = scaler.decide(StepTimings(generate_s, step_s, samples, generation_s), serving=pool.size)
    pool.resize(decision.target)

The signal is the learner's wait: the share of a step it spent waiting for the step's samples
(`time/generate / time/step`, averaged over `window_steps`). On-policy that is the whole generation;
in async mode only what generating ahead did not hide. Above `grow_above` the pool grows by one
engine, below `shrink_below` it shrinks by one, in between it holds (hysteresis), and after a resize
it waits `cooldown_steps` before deciding again. A growth must pay: once the new engine serves, the
pool's generation throughput (completion tokens per second the pool was busy, which does not move when
completions grow longer) must have risen by `min_gain`,
else the growth is undone and the pool grows no further than that (a machine whose cores are all
busy gains nothing from one more engine) for `retry_growth_steps` steps, after which it may try again. While engines are still starting (a cluster waiting for
a node) nothing is decided: they do not block the run, and the pool serves on those it has.
"""

from __future__ import annotations

import collections
import dataclasses

from orchestrator.contracts.rollout import AutoscaleSettings


@dataclasses.dataclass(frozen=True)
class StepTimings:
    generate_s: float  # how long the learner waited for the step's samples (time/generate)
    step_s: float  # the whole step (time/step)
    tokens: int  # completion tokens generated for it
    generation_s: float  # seconds the pool was busy generating during it (time/pool_busy)


@dataclasses.dataclass(frozen=True)
class Decision:
    target: int  # engines the pool should have
    change: int  # +1 grow, -1 shrink, 0 hold
    reason: str


class Autoscaler:
    def __init__(self, settings: AutoscaleSettings, engines: int):
        self.settings = settings
        self.target = engines
        self.ceiling = settings.max_engines  # lowered when a growth did not pay, until `_ceiling_steps` run out
        self._ceiling_steps = 0
        self._window: collections.deque[StepTimings] = collections.deque(maxlen=settings.window_steps)
        self._cooldown = 0
        self._growth: tuple[int, float] | None = None  # (engines before, their throughput) of a growth on trial
        self._started = False  # engines we waited for just started: their first batch warms them up

    def resized(self, engines: int) -> None:
        """The pool was resized from outside (`scale`, within the bounds): decide from this size, after a
        cooldown; a growth on trial is forgotten (the size it was judged against is gone)."""
        self.target = engines
        self._growth, self._started = None, False
        self._restart()

    def decide(self, timings: StepTimings, serving: int, pending: int) -> Decision:
        """The target after a step; `serving`: engines serving now, `pending`: engines still starting. Only
        steps after the cooldown with every engine serving enter the window: it measures the pool as sized."""
        self._age_ceiling()
        if self._cooldown:
            self._cooldown -= 1
            return self._hold(f"cooling down after a resize ({self._cooldown + 1} step(s) left)")
        if serving < self.target and pending:
            self._started = True
            return self._hold(f"waiting for {pending} engine(s) to start")
        if serving < self.target:  # given up (no node in time) or dead past max_restarts: go on from what serves
            self.target = max(self.settings.min_engines, serving)
            self._growth, self._started = None, False
            self._restart()
            if self.target > serving:  # below min_engines: ask again
                return Decision(self.target, 1, f"engines asked for never came: asking again for min_engines={self.target}")
            return self._hold(f"engines asked for never came: going on from the {serving} serving")
        if self._started:
            self._started = False
            return self._hold("new engine(s) warming up: their first batch is not measured")
        self._window.append(timings)
        if len(self._window) < self._window.maxlen:
            return self._hold(f"measuring ({len(self._window)}/{self._window.maxlen} steps)")
        wait, throughput = self._wait(), self._throughput()
        if self._growth is not None:
            undone = self._judge_growth(throughput)
            if undone is not None:
                return undone
        return self._by_wait(wait, throughput)

    def _by_wait(self, wait: float, throughput: float) -> Decision:
        settings = self.settings
        share = f"the learner waited {wait:.0%} of each step"
        if wait > settings.grow_above:
            if self.target >= self.ceiling:
                why = "max_engines" if self.ceiling == settings.max_engines else "the last growth did not pay"
                return self._hold(f"{share}, but the pool is at {self.target} engine(s) ({why})")
            self._growth = (self.target, throughput)
            return self._resize(self.target + 1, f"{share} (above grow_above={settings.grow_above:g})")
        if wait < settings.shrink_below and self.target > settings.min_engines:
            return self._resize(self.target - 1, f"{share} (below shrink_below={settings.shrink_below:g})")
        return self._hold(f"{share}: holding")

    def _judge_growth(self, throughput: float) -> Decision | None:
        """Undo a growth that did not raise throughput by `min_gain` (None: it paid, or nothing to judge)."""
        before, then = self._growth
        self._growth = None
        gain = throughput / then - 1 if then > 0 else float("inf")
        if gain >= self.settings.min_gain:
            return None
        self.ceiling = before
        self._ceiling_steps = self.settings.retry_growth_steps or 0
        later = f"for {self._ceiling_steps} steps" if self._ceiling_steps else "for the rest of the run"
        return self._resize(
            before,
            f"growing to {self.target} engines raised throughput {gain:+.0%} (min_gain={self.settings.min_gain:g}): "
            f"back to {before}, and no further growth {later}",
        )

    def _age_ceiling(self) -> None:
        """A lowered ceiling lasts `retry_growth_steps` steps (for ever with null)."""
        if self._ceiling_steps:
            self._ceiling_steps -= 1
            if not self._ceiling_steps:
                self.ceiling = self.settings.max_engines

    def _wait(self) -> float:
        step_s = sum(t.step_s for t in self._window)
        return sum(t.generate_s for t in self._window) / step_s if step_s > 0 else 0.0

    def _throughput(self) -> float:
        busy = sum(t.generation_s for t in self._window)
        return sum(t.tokens for t in self._window) / busy if busy > 0 else 0.0

    def _resize(self, target: int, reason: str) -> Decision:
        change = 1 if target > self.target else -1
        self.target = target
        self._restart()
        return Decision(target, change, reason)

    def _hold(self, reason: str) -> Decision:
        return Decision(self.target, 0, reason)

    def _restart(self) -> None:
        self._window.clear()
        self._cooldown = self.settings.cooldown_steps
