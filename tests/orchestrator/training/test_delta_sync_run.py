"""`weight_sync.delta: on` in whole `train` runs with bfloat16 engines, over the object store and over gloo
(with one engine killed after step 2, so that its replacement takes a dense anchor and then patches
again): every step's sync is checked, and the per-step rewards and engines-vs-learner log-prob gaps are
the dense path's, to the bit."""

import json
import subprocess
import sys
import time

import psutil
import pytest

# Slow (three `train` runs on this 2-core machine); in the default suite tests/workers/weights/test_delta_sync.py
# covers patches, rejection and resync on real engines, and test_delta.py the plain parts.
pytestmark = [pytest.mark.engines, pytest.mark.slow]

STEPS, KILL_AFTER = 6, 2
ARGS = ["prompts_per_step=2", "num_generations=4", "max_completion_length=12", f"max_steps={STEPS}", "plot_steps=100"]
ARGS += ["learning_rate=1e-5", "rollout.engines=2", "rollout.dtype=bfloat16"]  # a small step: most bfloat16 weights unchanged


def _run(run, *overrides: str, kill: bool = False) -> list[dict]:
    args = [*ARGS, *overrides, f"output_dir={run}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "train", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    metrics_file, deadline = run / "metrics.jsonl", time.monotonic() + 400
    if kill:
        while not (metrics_file.is_file() and metrics_file.read_text().count("\n") >= KILL_AFTER):
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended or stalled early"
            time.sleep(0.05)
        engines = [p for p in psutil.Process(proc.pid).children(recursive=True) if "EngineCore" in " ".join(p.cmdline())]
        assert len(engines) == 2
        engines[0].kill()  # one: a group on both would fail as a poison group (rollout.max_group_deaths)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]
    return [json.loads(line) for line in metrics_file.read_text().splitlines()]


def test_delta_sync_trains_exactly_as_the_dense_sync_over_the_object_store_and_gloo_through_an_engine_replacement(tmp_path):
    dense = _run(tmp_path / "dense", "weight_sync.delta=off")
    stored = _run(tmp_path / "object_store", "weight_sync.delta=on")
    gloo = _run(tmp_path / "gloo", "weight_sync.delta=on", "weight_sync.backend=gloo", kill=True)
    for name, figure in (("reward", "reward_mean"), ("gap", "sampling/sampling_logp_difference/max")):
        print(
            f"\n{name}: dense {[m[figure] for m in dense]}, object store {[m[figure] for m in stored]}, gloo {[m[figure] for m in gloo]}"
        )
    print(f"density: object store {[m['weight_sync/density'] for m in stored]}, gloo {[m['weight_sync/density'] for m in gloo]}")
    for figure in ("reward_mean", "sampling/sampling_logp_difference/max"):
        assert [m[figure] for m in stored] == [m[figure] for m in dense] == [m[figure] for m in gloo], figure
    for steps in (stored, gloo):
        assert all(len(m["weight_sync/checksum"]) == 16 and m["weight_sync/dense_resyncs"] == 0 for m in steps)
        assert all(m["weight_sync/density"] < 1 for m in steps[:KILL_AFTER])  # the engines' first weights were the anchor
    assert [m["weight_sync/transport"] for m in gloo[:KILL_AFTER]] == ["gloo"] * KILL_AFTER
    assert gloo[-1]["engine_restarts"] >= 1
    replaced_at = next(m["step"] for m in gloo if m["engine_restarts"] >= 1)
    # The replacement took the whole model as it joined (the object store), then patches over a new gloo group.
    assert any(m["weight_sync/transport"] == "gloo" and m["weight_sync/density"] < 1 for m in gloo if m["step"] > replaced_at)
