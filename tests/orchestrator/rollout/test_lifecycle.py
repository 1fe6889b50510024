"""An engine's life in the fleet (orchestrator/rollout/lifecycle.py), without Ray: one record, one state,
changed only along the arrows, and the pool's index of serving engines kept in step at every change."""

import pytest

from orchestrator.rollout.lifecycle import Engine, EngineRecords, Life


def _started(records: EngineRecords, engine_id: int) -> Engine:
    return records.add(Engine(engine_id, f"actor-{engine_id}", waiting=f"start-{engine_id}", deadline=10.0))


def test_an_engine_goes_from_starting_to_gone_and_the_serving_index_follows_every_step():
    records = EngineRecords()
    engine = _started(records, 0)
    assert records.actors == {} and list(records.in_state(Life.STARTING)) == [0] and records.problems() == []
    records.move(0, Life.SERVING)
    engine.waiting, engine.deadline, engine.node = None, float("inf"), "node-a"
    assert records.actors == {0: "actor-0"} and records.problems() == []
    records.move(0, Life.DRAINING)
    assert records.actors == {0: "actor-0"} and list(records.in_state(Life.DRAINING)) == [0]  # still holds groups
    records.move(0, Life.STOPPING)
    assert records.problems() == [
        "engine 0 is stopping with no call or deadline to wait on",
        "engine 0 is stopping but still placed on node node-a",
    ]
    engine.waiting, engine.deadline, engine.node = "shutdown-0", 30.0, None
    assert records.actors == {} and records.problems() == []
    assert records.remove(0) is engine and records.remove(0) is None and list(records) == []


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ([], Life.DRAINING),  # a starting engine serves first
        ([Life.SERVING, Life.STOPPING], Life.SERVING),  # a stopping engine never serves again
        ([Life.SERVING], Life.STARTING),
    ],
)
def test_a_change_off_the_arrows_is_refused_and_changes_nothing(path, refused):
    records = EngineRecords()
    engine = _started(records, 3)
    for life in path:
        records.move(3, life)
    before = engine.life
    with pytest.raises(ValueError, match=f"engine 3 cannot go from {before.value} to {refused.value}"):
        records.move(3, refused)
    assert engine.life is before and records.in_state(before)[3] is engine


def test_a_draining_engine_may_serve_again_and_the_views_are_read_only():
    records = EngineRecords()
    for engine_id in (0, 1):
        _started(records, engine_id)
        records.move(engine_id, Life.SERVING)
    records.move(1, Life.DRAINING)
    records.move(1, Life.SERVING)  # a colocated pool grown back before the engine stopped
    assert sorted(records.in_state(Life.SERVING)) == [0, 1] and records.problems() == []
    with pytest.raises(TypeError):
        records.in_state(Life.SERVING)[5] = None
    with pytest.raises(ValueError, match="added twice"):
        _started(records, 0)


def test_problems_name_an_index_out_of_step_and_a_shared_colocated_slot():
    records = EngineRecords()
    for engine_id in (0, 1):
        _started(records, engine_id).slot = 0
    records.actors[7] = "stray"
    assert records.problems() == [
        "actors lists [7], the engines serving or draining are []",
        "two engines sit in one colocated slot: [0, 0]",
    ]
