"""The watchdog that finds wedged engines: asked only once they have held groups for an interval
without handing any back, and wedged when an answer says so or none comes in time. Plain futures
stand in for Ray's."""

import concurrent.futures

from orchestrator.rollout.health import ANSWER_MARGIN_S, Watchdog


class _Engines:
    def __init__(self):
        self.now = 0.0
        self.asked = []  # (engine id, time)
        self.answers = {}  # engine id -> the future of its latest probe

    def probe(self, engine_id, timeout_s):
        self.asked.append((engine_id, self.now))
        self.answers[engine_id] = concurrent.futures.Future()
        return self.answers[engine_id]


def _watchdog(engines, interval_s=10.0, timeout_s=30.0):
    return Watchdog(interval_s, timeout_s, engines.probe, clock=lambda: engines.now)


def test_busy_engines_are_asked_once_per_interval_and_idle_ones_not_at_all():
    engines = _Engines()
    watchdog = _watchdog(engines)
    assert watchdog.check([1, 2]) == {} and engines.asked == []  # busy from now: asked an interval later
    engines.now = 10.0
    assert watchdog.check([1, 2]) == {}
    assert engines.asked == [(1, 10.0), (2, 10.0)]
    engines.answers[1].set_result(True)
    engines.now = 11.0
    assert watchdog.check([1, 2]) == {}  # 2 has not answered yet, well within its time
    engines.now = 15.0
    assert watchdog.check([1]) == {} and len(engines.asked) == 2  # 1 is not due before 21 s; 2 went idle
    engines.now = 21.0
    assert watchdog.check([1, 2]) == {}  # 2 is busy again: its interval starts over
    assert engines.asked[2:] == [(1, 21.0)]
    engines.now = 31.0
    watchdog.check([1, 2])
    assert engines.asked[3:] == [(2, 31.0)]  # 1 is still waiting on its answer from 21 s


def test_an_engine_that_hands_groups_back_is_not_asked():
    engines = _Engines()
    watchdog = _watchdog(engines)
    watchdog.check([3, 4])
    for now in (6.0, 12.0, 18.0, 24.0):
        engines.now = now
        watchdog.heard(3)  # 3 returns results every 6 s; 4 returns nothing
        assert watchdog.check([3, 4]) == {}
    assert engines.asked == [(4, 12.0)]
    engines.now = 34.0  # 3 fell silent at 24 s
    watchdog.check([3, 4])
    assert (3, 34.0) in engines.asked


def test_an_engine_that_says_it_did_not_answer_in_time_is_wedged():
    engines = _Engines()
    watchdog = _watchdog(engines)
    watchdog.check([4])
    engines.now = 10.0
    watchdog.check([4])
    engines.answers[4].set_result(False)
    engines.now = 40.5
    wedged = watchdog.check([4])
    assert list(wedged) == [4] and "rollout.health_check_timeout_s=30s" in wedged[4]


def test_an_engine_whose_actor_does_not_answer_at_all_is_wedged_after_the_margin():
    engines = _Engines()
    watchdog = _watchdog(engines)
    watchdog.check([7])
    engines.now = 10.0
    watchdog.check([7])  # asked
    engines.now = 10.0 + 30.0 + ANSWER_MARGIN_S - 0.1
    assert watchdog.check([7]) == {}
    engines.now = 10.0 + 30.0 + ANSWER_MARGIN_S + 0.1
    wedged = watchdog.check([7])
    assert list(wedged) == [7] and "did not answer a health check" in wedged[7]


def test_a_dead_engine_is_left_to_the_pool_and_zero_interval_turns_checks_off():
    engines = _Engines()
    watchdog = _watchdog(engines)
    watchdog.check([2])
    engines.now = 10.0
    watchdog.check([2])
    engines.answers[2].set_exception(RuntimeError("actor died"))
    assert watchdog.check([2]) == {}
    off = _watchdog(engines, interval_s=0.0)
    engines.now = 100.0
    assert off.check([5]) == {} and off.check([5]) == {} and not any(engine_id == 5 for engine_id, _ in engines.asked)
