"""Multi-turn tool rollouts end to end: `train` on the lookup task (real Ray, vLLM, TRL).

The tool is the lookup tool with two faults: it raises for 'apple' and hangs for 'river' (past its
1 s deadline). The prompts repeat topics, so duplicate prompts must stay separate groups.
"""

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from orchestrator.builtin import lookup_task
from tests.orchestrator.training.short_run import metrics, train_config

# Slow (a whole `train` run on this 2-core machine); in the default suite workers/rollout/test_multi_turn.py and workers/tools/test_runner.py cover the tool loop, its masks and failing tools.
pytestmark = [pytest.mark.engines, pytest.mark.slow]

STEPS, GENERATIONS = 4, 4
TOPICS = ["apple", "river", "tiger", "apple", "piano", "tiger"]  # duplicates on purpose
TOOLS = Path(__file__).parents[2] / "workers" / "tools" / "flaky_tools.py"
SHIPPED = Path(__file__).parents[3] / "configs" / "tools" / "lookup.yaml"
ERROR = " error: {error} "


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tools")
    prompts = folder / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": lookup_task.prompt_for(t), "answer": lookup_task.CODES[t]}) + "\n" for t in TOPICS)
    )
    config = yaml.safe_load(SHIPPED.read_text())
    config.update(
        prompts=str(prompts),
        prompts_per_step=len(TOPICS),
        num_generations=GENERATIONS,
        max_steps=STEPS,
        max_observation_tokens=48,
        max_completion_length=96,
        output_dir=str(folder / "run"),
        tool_error_observation=ERROR,
    )
    config["tools"][0].update(fn=f"{TOOLS}:flaky_lookup", timeout_s=1.0)
    train_config(folder, config)
    return folder / "run", config


@pytest.fixture(scope="module")
def tokenizer(run):
    from transformers import AutoTokenizer

    out, _ = run
    return AutoTokenizer.from_pretrained(out / "checkpoints" / f"step-{STEPS:06d}")


def test_the_run_finishes_despite_failing_tools_and_counts_them(run):
    out, _ = run
    steps = metrics(out)
    assert [m["step"] for m in steps] == list(range(1, STEPS + 1))
    assert sum(m["tools/errors"] for m in steps) >= 1 and sum(m["tools/timeouts"] for m in steps) >= 1
    assert max(m["sampling/sampling_logp_difference/mean"] for m in steps) < 0.01  # over model tokens only
    assert all(m["tools/calls"] > 0 and m["turns/mean"] > 1 for m in steps)


def test_completions_call_the_tool_read_its_result_and_answer(run):
    out, _ = run
    completions = pq.read_table(out / "rollouts").column("completion").to_pylist()
    well_formed = re.compile(r"^ <search> (\w+) </search><result> (\w+) </result> answer (\w+)$")
    answered_from_result = [m for m in map(well_formed.match, completions) if m and m.group(2) == m.group(3)]
    assert len(answered_from_result) >= len(completions) // 4


def test_the_mask_covers_exactly_the_observation_tokens(run, tokenizer):
    out, config = run
    tool = config["tools"][0]
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    end_id = tokenizer.convert_tokens_to_ids(tool["end"])
    rows = pq.read_table(out / "rollouts").to_pylist()
    checked = 0
    for row in rows:
        ids, logprobs = row["completion_ids"], row["logprobs"]
        mask = [1 - m for m in row["tool_mask"]]  # 1: a tool's observation token
        assert len(ids) == len(mask) == len(logprobs)
        assert [lp is None for lp in logprobs] == [m == 1 for m in mask]
        runs = list(_runs_of_ones(mask))
        assert len(runs) == len(row["tool_calls"]) and len(runs) in (row["turns"] - 1, row["turns"])
        for (start, end), call in zip(runs, row["tool_calls"]):
            expected = encode(tool["result_begin"]) + encode(call["result"]) + encode(tool["result_end"])
            assert ids[start - 1] == end_id  # right after the model closed its call
            assert ids[start:end] == expected[: end - start] and (end - start == len(expected) or end == len(ids))
            checked += 1
    assert checked >= len(rows) // 2


def test_a_failing_tool_shows_the_model_the_error_observation(run, tokenizer):
    out, _ = run
    calls = [c for calls in pq.read_table(out / "rollouts").column("tool_calls").to_pylist() for c in calls]
    raised = [c for c in calls if c["status"] == "error"]
    timed_out = [c for c in calls if c["status"] == "timeout"]
    assert raised and all(c["call"].strip() == "apple" for c in raised)
    assert raised[0]["result"] == ERROR.replace("{error}", "tool 'lookup' raised ValueError: index offline for apple")
    assert timed_out and timed_out[0]["result"] == ERROR.replace("{error}", "tool 'lookup' did not answer within 1.0s")
    completions = pq.read_table(out / "rollouts").column("completion").to_pylist()
    assert any(f"<result>{raised[0]['result']}</result>" in c for c in completions)


def test_groups_with_different_turn_counts_assemble_and_duplicates_stay_apart(run):
    out, _ = run
    table = pq.read_table(out / "rollouts")
    assert table.num_rows == STEPS * len(TOPICS) * GENERATIONS
    keys = list(zip(*(table.column(c).to_pylist() for c in ("step", "group_id", "sample_index"))))
    assert len(set(keys)) == len(keys)
    turns_by_group: dict[tuple, set] = {}
    samples_by_group: dict[tuple, list] = {}
    for step, group, index, turns in zip(*(table.column(c).to_pylist() for c in ("step", "group_id", "sample_index", "turns"))):
        turns_by_group.setdefault((step, group), set()).add(turns)
        samples_by_group.setdefault((step, group), []).append(index)
    assert any(len(turns) > 1 for turns in turns_by_group.values())  # samples of one group took different turns
    assert all(indices == list(range(GENERATIONS)) for indices in samples_by_group.values())
    first_step = table.filter(_eq(table, "step", 1))
    apple = lookup_task.prompt_for("apple")
    assert first_step.filter(_eq(first_step, "prompt", apple)).num_rows == 2 * GENERATIONS  # two groups, not one


def _eq(table, column, value):
    import pyarrow.compute as pc

    return pc.equal(table.column(column), value)


def _runs_of_ones(mask: list[int]):
    start = None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            yield start, i
            start = None
