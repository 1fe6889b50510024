import numpy as np
import pytest

from orchestrator.contracts.groups import GroupResult, Sample
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rollout.groups import GroupShapeError, assemble, make_groups
from orchestrator.rollout.parquet import rollout_table
from orchestrator.rollout.samples import StepSamples

PATTERN = ["p0", "p0", "p1", "p0", "p2", "p2", "p3", "p0", "p1", "p4", "p4", "p4"]


def _sample(index: int) -> Sample:
    return Sample(index, f"c{index}", [index], [-0.5], "stop", None, None)


def _results(requests, engine_of=lambda group_id: group_id % 2):
    return [GroupResult(r.group_id, engine_of(r.group_id), 0, [_sample(i) for i in range(r.num_generations)]) for r in requests]


def _requests(n=3):
    return make_groups(PATTERN, [[ord(p[1])] for p in PATTERN], n, SamplingConfig())


def test_duplicate_prompts_are_separate_groups_in_input_order():
    requests = _requests()
    assert [r.group_id for r in requests] == list(range(12))
    assert [r.prompt for r in requests] == PATTERN
    table = rollout_table(StepSamples.assemble(requests, list(reversed(_results(requests)))))
    assert table.num_rows == 36
    rows = table.to_pylist()
    assert [(row["group_id"], row["sample_index"]) for row in rows] == [(g, s) for g in range(12) for s in range(3)]
    assert [row["prompt"] for row in rows[::3]] == PATTERN


def test_stream_requests_keep_their_stream_ids_and_prompt_indices():
    from orchestrator.data.stream import PromptStream
    from orchestrator.rollout.samples import Ragged
    from orchestrator.training.requests import PromptSet, build_requests

    stream = PromptStream(PATTERN, seed=3, position=5)
    items = stream.take(4)
    ids = Ragged.of([[index] for index in range(len(PATTERN))], np.int32)
    requests = build_requests(items, PromptSet(PATTERN, ids), 2, SamplingConfig())
    assert [r.group_id for r in requests] == [5, 6, 7, 8]  # stream positions, never list positions
    assert [r.prompt_index for r in requests] == [item.prompt_index for item in items]
    assert [r.prompt_ids for r in requests] == [[item.prompt_index] for item in items]
    assert [r.prompt for r in requests] == [PATTERN[item.prompt_index] for item in items]


def test_missing_sample_is_a_shape_error():
    requests = _requests()
    results = _results(requests)
    results[5] = GroupResult(5, 1, 0, [_sample(0), _sample(1)])
    with pytest.raises(GroupShapeError, match=r"group 5 has sample indices \[0, 1\], expected 0..2"):
        assemble(requests, results)


def test_missing_and_duplicated_groups_are_shape_errors():
    requests = _requests()
    results = _results(requests)
    with pytest.raises(GroupShapeError, match="group 11 .* has no result"):
        assemble(requests, results[:-1])
    with pytest.raises(GroupShapeError, match="group 3 came back twice"):
        assemble(requests, results + [results[3]])


def _segment(index: int, segment: int) -> Sample:
    return Sample(index, f"c{index}.{segment}", [index], [-0.5], "stop", None, None, segment=segment)


def test_a_split_sessions_segments_follow_it_under_its_index_and_count_once():
    """agent.on_prefix_mismatch: split: sample 1's session is two segments, rows (1, 0) and (1, 1); the
    group's statistics count the session once, and its rows know their session's last segment."""
    requests = _requests()[:1]
    samples = [_segment(0, 0), _segment(1, 0), _segment(1, 1), _segment(2, 0)]
    record = StepSamples.assemble(requests, [GroupResult(0, 0, 0, samples)])
    assert record.segment.tolist() == [0, 0, 1, 0] and record.sessions().tolist() == [True, True, False, True]
    assert record.session_last_rows().tolist() == [0, 2, 2, 3]
    assert rollout_table(record).column("segment").to_pylist() == [0, 0, 1, 0]

    for wrong in (
        [_segment(0, 0), _segment(1, 1), _segment(2, 0)],
        [_segment(0, 0), _segment(1, 0), _segment(2, 0), _segment(1, 1)],
    ):
        with pytest.raises(GroupShapeError, match="group 0 has sample indices"):
            assemble(requests, [GroupResult(0, 0, 0, wrong)])
