"""Per-step metrics of tool runs: the keys are on every step, so a step without calls still reports."""

import pyarrow as pa

from orchestrator.commands.report import report
from orchestrator.training.metrics import rollout_metrics

EOS = 0


def _table(tool_calls, observation_mask, turns):
    rows = len(turns)
    return pa.table(
        {
            "reward": [1.0] * rows,
            "completion_ids": [[5, 6, 7, EOS]] * rows,
            "observation_mask": observation_mask,
            "finish_reason": ["stop"] * rows,
            "stop_reason": [None] * rows,
            "turns": turns,
            "tool_calls": tool_calls,
        }
    )


def test_tool_metrics_count_outcomes_and_leave_observations_out_of_lengths():
    call = {"name": "t", "call": "q", "result": "r", "latency_s": 0.5}
    table = _table(
        [[{**call, "status": "ok"}, {**call, "status": "timeout"}], [{**call, "status": "error"}]],
        [[0, 1, 1, 0], [0, 0, 1, 0]],
        [3, 2],
    )
    metrics = rollout_metrics(table, EOS, tools=True)
    assert (metrics["tools/calls"], metrics["tools/errors"], metrics["tools/timeouts"]) == (3, 1, 1)
    assert metrics["completion_length/mean"] == 2.5 and metrics["observation_tokens/mean"] == 1.5
    assert metrics["turns/mean"] == 2.5


def test_report_of_a_tool_run_whose_later_step_made_no_call():
    step = {
        "reward_mean": 0.5,
        "samples": 2,
        "samples_per_s": 1.0,
        "rollout/logprob_abs_diff": 0.0,
        **{f"time/{p}": 0.1 for p in ("generate", "reward", "train", "sync", "step")},
    }
    calls = _table(
        [[{"name": "t", "call": "q", "result": "r", "latency_s": 0.5, "status": "ok"}], []], [[0, 1, 0, 0], [0] * 4], [2, 1]
    )
    none = _table([[], []], [[0] * 4, [0] * 4], [1, 1])
    metrics = [{**step, **rollout_metrics(t, EOS, tools=True), "step": i + 1} for i, t in enumerate([calls, none])]
    assert "tools: 1 calls (0.5/step), 0 errors, 0 timeouts" in report(metrics)
