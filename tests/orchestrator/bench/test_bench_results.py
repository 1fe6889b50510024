"""How `bench` reports: medians of repeated runs, and saving one case without losing the others."""

import json

from orchestrator.bench.generation import _median
from orchestrator.commands.bench import _save


def test_the_median_run_is_reported_with_every_run_beside_it():
    figures = _median([(100, 1.0), (300, 1.0), (200, 1.0)])
    assert figures["tokens_per_s"] == 200 and figures["tokens"] == 200
    assert figures["runs_tokens_per_s"] == [100, 300, 200]


def test_measuring_one_case_again_keeps_the_other_cases_and_entries(tmp_path):
    out = tmp_path / "bench.json"
    out.write_text(json.dumps({"cases": {"fixed": {"x": 1}, "realistic": {"x": 2}}, "sync": {"s": 3}}))
    _save(str(out), {"cases": {"fixed": {"x": 10}}, "generation": {"fixed": {"g": 1}}})
    saved = json.loads(out.read_text())
    assert saved["cases"] == {"fixed": {"x": 10}, "realistic": {"x": 2}}
    assert saved["sync"] == {"s": 3} and saved["generation"] == {"fixed": {"g": 1}}
