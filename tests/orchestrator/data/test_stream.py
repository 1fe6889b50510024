from orchestrator.data.stream import PromptStream


def test_group_ids_are_stream_positions_and_duplicates_stay_distinct():
    stream = PromptStream(["same", "same", "other"], seed=3)
    items = stream.take(7)
    assert [item.group_id for item in items] == list(range(7))
    assert sorted(item.prompt_index for item in items[:3]) == [0, 1, 2]  # one epoch covers each once
    assert sum(item.prompt == "same" for item in items[:3]) == 2


def test_resuming_at_a_position_continues_the_same_stream():
    full = PromptStream([str(i) for i in range(5)], seed=1).take(12)
    resumed = PromptStream([str(i) for i in range(5)], seed=1, position=7).take(5)
    assert resumed == full[7:]
