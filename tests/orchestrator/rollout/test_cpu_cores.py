from orchestrator.rollout.cpu_cores import CoreSlots, core_slice


def test_one_engine_takes_every_core_and_several_split_them():
    assert core_slice([0, 1], engines=1, slot=0) == "0,1"
    assert [core_slice(list(range(8)), 3, slot) for slot in range(3)] == ["0,1", "2,3", "4,5,6,7"]
    assert [core_slice([0, 1], 2, slot) for slot in range(2)] == ["0", "1"]


def test_more_engines_than_cores_share_round_the_cores():
    assert [core_slice([0, 1], 3, slot) for slot in range(4)] == ["0", "1", "0", "1"]


def test_a_replacement_takes_the_slot_its_dead_engine_freed():
    slots = CoreSlots(list(range(4)), engines=2)
    assert [slots.take(0), slots.take(1)] == ["0,1", "2,3"]
    slots.free(0)
    assert slots.take(2) == "0,1"  # engine 2 replaces engine 0, on its cores
