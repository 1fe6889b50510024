import pytest

from orchestrator.rollout.dispatcher import LeastLoadedDispatcher


def test_spreads_groups_across_idle_engines():
    dispatcher = LeastLoadedDispatcher([0, 1, 2], capacity=100)
    picks = []
    for _ in range(6):
        engine = dispatcher.pick(4)
        dispatcher.started(engine, 4)
        picks.append(engine)
    assert sorted(picks) == [0, 0, 1, 1, 2, 2]


def test_prefers_the_least_loaded_engine_and_respects_capacity():
    dispatcher = LeastLoadedDispatcher([0, 1], capacity=8)
    dispatcher.started(0, 8)
    dispatcher.started(1, 4)
    assert dispatcher.pick(4) == 1
    dispatcher.started(1, 4)
    assert dispatcher.pick(4) is None  # both full: the group waits on the driver
    dispatcher.finished(0, 8)
    assert dispatcher.pick(4) == 0


def test_an_idle_engine_takes_a_group_larger_than_capacity():
    dispatcher = LeastLoadedDispatcher([0], capacity=2)
    assert dispatcher.pick(16) == 0


def test_finishing_more_than_started_is_an_error():
    dispatcher = LeastLoadedDispatcher([0], capacity=2)
    with pytest.raises(RuntimeError):
        dispatcher.finished(0, 1)


def test_removed_engine_takes_no_groups_and_late_finishes_are_ignored():
    dispatcher = LeastLoadedDispatcher([0, 1], capacity=8)
    dispatcher.started(0, 4)
    dispatcher.remove(0)
    dispatcher.finished(0, 4)  # a group of the dead engine reports late
    assert dispatcher.pick(4) == 1
    dispatcher.add(2)
    dispatcher.started(1, 4)
    assert dispatcher.pick(4) == 2


def test_at_hundreds_of_engines_picks_follow_the_least_loaded_rule():
    """The heap gives the same engine as checking every engine: least samples in flight, then
    fewest groups given so far, then lowest id; None when the least loaded cannot take the group."""
    import random

    rng = random.Random(0)
    engines, capacity = list(range(300)), 64
    dispatcher = LeastLoadedDispatcher(engines, capacity)
    load, assigned, live, inflight = dict.fromkeys(engines, 0), dict.fromkeys(engines, 0), set(engines), []
    for step in range(6_000):
        cost = rng.choice([4, 8, 8, 16])
        open_engines = [e for e in live if load[e] == 0 or load[e] + cost <= capacity]
        expected = min(open_engines, key=lambda e: (load[e], assigned[e], e)) if open_engines else None
        assert dispatcher.pick(cost) == expected, step
        if expected is not None and rng.random() < 0.6:
            dispatcher.started(expected, cost)
            load[expected] += cost
            assigned[expected] += 1
            inflight.append((expected, cost))
        elif inflight:
            engine, done = inflight.pop(rng.randrange(len(inflight)))
            dispatcher.finished(engine, done)
            if engine in live:
                load[engine] -= done
        if step % 1000 == 999:  # an engine dies; a new one joins
            gone = rng.choice(sorted(live))
            dispatcher.remove(gone)
            live.discard(gone)
            joined = max(engines) + 1
            engines.append(joined)
            dispatcher.add(joined)
            live.add(joined)
            load[joined] = assigned[joined] = 0
