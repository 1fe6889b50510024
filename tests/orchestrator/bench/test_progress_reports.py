"""The fleet figures of `bench --only progress-reports` (no engine): what reports every N tokens would save
and send, from the preemption model's lengths and timing."""

from orchestrator.bench.preemption import Fleet
from orchestrator.bench.progress_reports import BYTES_PER_TOKEN, EVERY, fleet_figures


def test_reports_save_all_but_half_an_interval_and_send_every_token_once():
    figures = fleet_figures(engines=1024)
    fleet = Fleet(engines=1024)
    tokens_per_s = 1024 * fleet.capacity / fleet.token_s
    # a sample in flight is a length-biased draw: further along than half the mean length, short of the cut
    assert fleet.mean_tokens / 2 < figures["made_per_sample"] < fleet.max_tokens
    assert figures["lost_per_death_engine_s"] == figures["made_per_sample"] * fleet.token_s
    for every in EVERY:
        report = figures["every"][every]
        assert report["lost_per_death_engine_s"] == every / 2 * fleet.token_s < figures["lost_per_death_engine_s"]
        assert abs(report["reports_per_s"] * every - tokens_per_s) < 1e-6 * tokens_per_s
        assert report["bytes_per_s"] == tokens_per_s * BYTES_PER_TOKEN
