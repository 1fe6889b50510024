"""Noticing a wedged engine: alive to the OS and to Ray, but its vLLM engine process has stopped
(a hung GPU kernel, a stuck collective, a process stopped by a signal).

Such an engine keeps its groups forever: nothing fails, so nothing is replaced, and without a check
the pool would wait for `rollout.request_timeout_s` (30 minutes by default). So while `generate`
runs, an engine that has held groups for `rollout.health_check_interval_s` without handing any back
is asked whether its engine process answers a round trip (`RolloutEngine.responsive`: vLLM's
scheduler takes such a call between two model steps, so it answers within one step however loaded it
is; a weight load in progress counts as an answer, having its own deadline). Groups handed back count
as an answer: the engine process finished them at most one linger (engines /
`rollout.engine_calls_per_s` seconds) before they came back. So an engine that keeps returning
results is never asked, and a busy pool makes no such calls (asking each of 1024 engines every 5 s
would be about 200 calls a second on the driver). An engine that
says no, or whose actor does not answer at all within `health_check_timeout_s` plus a margin for
Ray, is wedged: the pool kills it, its groups go to the others and a replacement starts with the
current weights, as for an engine that died. It is found within one interval, plus that deadline,
of the last groups it handed back or of its becoming busy.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterable

# On top of the engine's own deadline, for the answer to travel back through Ray on a busy machine.
ANSWER_MARGIN_S = 15.0


class Watchdog:
    def __init__(
        self,
        interval_s: float,
        timeout_s: float,
        probe: Callable[[int, float], concurrent.futures.Future],
        clock: Callable[[], float] = time.monotonic,
    ):
        """`probe(engine_id, timeout_s)` asks one engine and returns a future of its answer (True:
        it answered within `timeout_s`). `interval_s` 0 turns the checks off."""
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._probe = probe
        self._clock = clock
        self._asked: dict[int, tuple[concurrent.futures.Future, float]] = {}  # engine -> (answer, asked at)
        self._due: dict[int, float] = {}  # engine -> when to ask it next

    def heard(self, engine_id: int) -> None:
        """The engine handed groups back: it needs no asking for another interval."""
        self._due[engine_id] = self._clock() + self.interval_s

    def check(self, busy: Iterable[int]) -> dict[int, str]:
        """Ask the engines in `busy` (those holding groups) that are due, collect answers, and return
        the engines found wedged, with why. An engine that died is left to the pool's own handling."""
        if not self.interval_s:
            return {}
        now, busy = self._clock(), set(busy)
        for engine_id in set(self._asked) - busy:  # idle now: what it answers no longer matters
            del self._asked[engine_id]
        for engine_id in set(self._due) - busy:  # its interval starts again when it next holds groups
            del self._due[engine_id]
        wedged = {}
        for engine_id in busy:
            asked = self._asked.get(engine_id)
            if asked is None:
                if now >= self._due.setdefault(engine_id, now + self.interval_s):
                    self._asked[engine_id] = (self._probe(engine_id, self.timeout_s), now)
                continue
            answer, asked_at = asked
            if answer.done():
                del self._asked[engine_id]
                self._due[engine_id] = now + self.interval_s
                if answer.exception() is None and not answer.result():
                    wedged[engine_id] = (
                        f"its vLLM engine process did not answer within rollout.health_check_timeout_s={self.timeout_s:g}s"
                    )
            elif now - asked_at > self.timeout_s + ANSWER_MARGIN_S:
                del self._asked[engine_id]
                wedged[engine_id] = (
                    f"it did not answer a health check within {now - asked_at:.0f}s "
                    f"(rollout.health_check_timeout_s={self.timeout_s:g}s plus {ANSWER_MARGIN_S:g}s)"
                )
        for engine_id in wedged:
            self._due.pop(engine_id, None)
        return wedged
