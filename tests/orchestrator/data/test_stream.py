import pytest

from orchestrator.contracts.errors import UserError
from orchestrator.data.prompt_data import PromptData
from orchestrator.data.sources import Sources, join
from orchestrator.data.stream import MixedStream, PromptStream


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


def _mixed(position: int = 0, ratios=(0.75, 0.25), seed: int = 1) -> MixedStream:
    prompts = [f"a{i}" for i in range(7)] + [f"b{i}" for i in range(3)]
    return MixedStream(prompts, [list(range(7)), list(range(7, 10))], list(ratios), seed, position)


def test_weighted_sources_are_drawn_at_their_ratio_within_one_prompt_at_every_point():
    items = _mixed().take(160)  # 20 steps of 8 prompts
    for drawn in range(1, 161):
        from_b = sum(item.prompt.startswith("b") for item in items[:drawn])
        assert abs(from_b - 0.25 * drawn) < 1, drawn
    assert [item.group_id for item in items] == list(range(160))
    a_rows = [item.prompt_index for item in items if item.prompt.startswith("a")]
    assert sorted(a_rows[:7]) == list(range(7))  # each source goes through its rows, an epoch at a time
    uneven = _mixed(ratios=(3, 2)).take(50)
    assert sum(item.prompt.startswith("b") for item in uneven) == 20  # ratios are normalised


def test_a_weighted_stream_resumed_at_a_position_draws_exactly_the_uninterrupted_prompts():
    full = _mixed().take(80)
    assert _mixed(position=37).take(43) == full[37:]
    rewound = _mixed()
    rewound.take(60)
    rewound.position = 10  # a rewind after a learner restart
    assert rewound.take(20) == full[10:30]
    assert _mixed(seed=2).take(80) != full  # the seed shuffles within each source


def test_joined_sources_keep_their_rows_and_every_row_has_every_column():
    data, rows = join(
        [PromptData.of_records([{"prompt": "x", "answer": "1"}]), PromptData.of_records([{"prompt": "y", "task": "t"}] * 2)]
    )
    assert data.prompts == ["x", "y", "y"] and rows == [[0], [1, 2]]
    assert list(data.columns) == [{"answer": "1", "task": None}, {"answer": None, "task": "t"}, {"answer": None, "task": "t"}]
    sources = Sources(["a", "b"], [1.0, 1.0], rows)
    assert sources.of_rows.tolist() == [0, 1, 1] and sources.kept([0, 2]).rows == [[0], [1]]
    with pytest.raises(UserError, match="prompts: source 'a' has no prompt within max_prompt_length"):
        sources.kept([1, 2])


def test_a_source_with_a_budget_of_its_own_sends_its_groups_with_it(tmp_path):
    import numpy as np

    from orchestrator.config.train import TrainConfig
    from orchestrator.contracts.sampling import SamplingConfig
    from orchestrator.data.stream import StreamItem
    from orchestrator.rollout.samples import Ragged
    from orchestrator.training.requests import PromptSet, build_requests

    sources = Sources(["short", "long"], [1.0, 1.0], [[0], [1]], [4, None])
    data = PromptSet(["x", "y"], Ragged.of([[1], [2]], np.int32), sources=sources)
    items = [StreamItem(0, 1, "y"), StreamItem(1, 0, "x"), StreamItem(2, 0, "x")]
    requests = build_requests(items, data, 2, SamplingConfig(max_tokens=32))
    assert [request.sampling.max_tokens for request in requests] == [32, 4, 4]
    with pytest.raises(ValueError, match=r"prompts\[0\].max_completion_length \(64\) is more than max_completion_length \(32\)"):
        TrainConfig(prompts=[{"source": "builtin:search", "max_completion_length": 64}], max_completion_length=32)
