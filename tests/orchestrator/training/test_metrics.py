"""Per-step metrics of tool runs: the keys are on every step, so a step without calls still reports."""

import numpy as np

from orchestrator.commands.report import report
from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample, ToolCall
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rollout.samples import StepSamples
from orchestrator.training.metrics import progress_line, rollout_metrics

EOS = 0


def _table(tool_calls, tool_mask, turns):
    """One sample per group, each [5, 6, 7, EOS] with its tool_mask, calls and turns, reward 1."""
    requests, results = [], []
    for group, (calls, mask, count) in enumerate(zip(tool_calls, tool_mask, turns)):
        requests.append(GroupRequest(group, group, "p", [1], 1, SamplingConfig()))
        sample = Sample(0, "c", [5, 6, 7, EOS], [0.0] * 4, "stop", None, None, mask, count, [ToolCall(**c) for c in calls])
        results.append(GroupResult(group, 0, 0, [sample]))
    samples = StepSamples.assemble(requests, results)
    samples.reward = np.ones(len(samples))
    return samples


def test_tool_metrics_count_outcomes_and_leave_observations_out_of_lengths():
    call = {"name": "t", "call": "q", "result": "r", "latency_s": 0.5}
    table = _table(
        [[{**call, "status": "ok"}, {**call, "status": "timeout"}], [{**call, "status": "error"}]],
        [[1, 0, 0, 1], [1, 1, 0, 1]],
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
        "sampling/sampling_logp_difference/mean": 0.0,
        "sampling/sampling_logp_difference/max": 0.0,
        "sampling/kl": 0.0,
        **{f"time/{p}": 0.1 for p in ("generate", "reward", "train", "sync", "step")},
    }
    calls = _table(
        [[{"name": "t", "call": "q", "result": "r", "latency_s": 0.5, "status": "ok"}], []], [[1, 0, 1, 1], [1] * 4], [2, 1]
    )
    none = _table([[], []], [[1] * 4, [1] * 4], [1, 1])
    metrics = [{**step, **rollout_metrics(t, EOS, tools=True), "step": i + 1} for i, t in enumerate([calls, none])]
    assert "tools: 1 calls (0.5/step), 0 errors, 0 timeouts" in report(metrics)


def test_report_and_step_line_show_the_correction_dynamic_sampling_and_staleness():
    step = {
        "step": 1,
        "policy_version": 0,
        "reward_mean": 0.5,
        "reward_std": 0.1,
        "samples": 8,
        "samples_per_s": 1.0,
        "completion_length/mean": 3.0,
        "sampling/sampling_logp_difference/mean": 0.002,
        "sampling/sampling_logp_difference/max": 0.1,
        "sampling/kl": 2e-5,
        "sampling/importance_sampling_ratio/min": 0.9,
        "sampling/importance_sampling_ratio/mean": 1.0001,
        "sampling/importance_sampling_ratio/max": 1.2,
        "clip_ratio/region_mean": 0.031,
        "dynamic_sampling/rounds": 2,
        "dynamic_sampling/groups_generated": 7,
        "dynamic_sampling/groups_filtered": 3,
        "dynamic_sampling/groups_surplus": 0,
        "dynamic_sampling/short_steps": 0,
        "staleness/max": 3,
        "staleness/mean": 1.5,
        "staleness/regenerated_groups": 1,
        **{f"time/{p}": 0.1 for p in ("generate", "reward", "train", "sync", "step")},
    }
    text = report([step, {**step, "step": 2, "sampling/importance_sampling_ratio/min": 0.8}])
    assert "importance-sampling ratio min 0.800, mean 1.0001, max 1.200" in text
    assert "dynamic sampling: 14 groups generated, 6 dropped for equal rewards, 0 surplus; 4 extra rounds" in text
    assert "async: staleness max 3, mean 1.50 policy versions; 2 groups generated again for max_staleness" in text
    line = progress_line(step, 10)
    assert "lp-diff 2.0e-03 is 1.000 clip 3.1% | groups 7 dropped 3 (+2 rounds)" in line


def test_the_step_line_shows_how_far_behind_an_async_step_is_and_the_groups_renewed():
    step = {
        "step": 5,
        "policy_version": 1,
        "reward_mean": 0.5,
        "reward_std": 0.1,
        "samples_per_s": 1.0,
        "completion_length/mean": 3.0,
        "sampling/sampling_logp_difference/mean": 0.002,
        "staleness/max": 3,
        "staleness/regenerated_groups": 0,
        **{f"time/{p}": 0.1 for p in ("generate", "reward", "train", "sync")},
    }
    assert progress_line(step, 10).endswith("| v1 lag 3")
    assert progress_line({**step, "staleness/regenerated_groups": 2}, 10).endswith("| v1 lag 3 (renewed 2 groups)")
    del step["staleness/regenerated_groups"]  # on-policy
    assert progress_line(step, 10).endswith("| v1")


def _step_figures() -> dict:
    """What every step line reads."""
    return {
        "step": 1,
        "policy_version": 1,
        "reward_mean": 0.5,
        "reward_std": 0.1,
        "samples_per_s": 1.0,
        "completion_length/mean": 3.0,
        "sampling/sampling_logp_difference/mean": 0.002,
        **{f"time/{p}": 0.1 for p in ("generate", "reward", "train", "sync")},
    }


def test_the_step_line_shows_the_bytes_each_engine_was_sent():
    step = {**_step_figures(), "weight_sync/bytes": 1_234_567}
    assert "sync 0.10s (1.23 MB) |" in progress_line(step, 10)
    assert "sync 0.10s (15.20 GB) |" in progress_line({**step, "weight_sync/bytes": 15_200_000_000}, 10)


def test_the_step_line_says_whether_the_old_log_probs_pass_ran():
    step = {**_step_figures(), "learner/tokens_per_s": 900.0, "learner/micro_batches": 2, "learner/pad_fraction": 0.0}
    assert "learner 900 tok/s mb 2 pad 0% old-lp pass skipped |" in progress_line(step, 10)
    assert "old-lp pass 1.25s |" in progress_line({**step, "time/old_logps": 1.25}, 10)
