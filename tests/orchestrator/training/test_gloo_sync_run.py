"""`weight_sync.backend: gloo` runs the NCCL path's code on CPU (workers/weights/nccl.py, gloo.py): the
learner's collective sender, vLLM's weight-transfer engine in every engine, the group's rendezvous,
and its opening again when engines are replaced (both, killed, so the run cannot end before a
replacement serves). Every step's sync names its transport and a
checksum both sides computed, and the engines' log-probs match the learner's as on the object-store
path."""

import json
import subprocess
import sys
import time

import psutil
import pytest

# Slow (a whole `train` run on this 2-core machine); in the default suite workers/weights/test_gloo.py covers the gloo group's packing, broadcast, rendezvous timeout and checksums (without engines).
pytestmark = [pytest.mark.engines, pytest.mark.slow]

STEPS, KILL_AFTER = 6, 2


def _engine_processes_of(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children(recursive=True) if "EngineCore" in " ".join(p.cmdline())]


def test_a_gloo_run_syncs_over_the_collective_path_and_opens_a_new_group_after_its_engines_are_replaced(tmp_path):
    run = tmp_path / "run"
    args = ["prompts_per_step=2", "num_generations=4", "max_completion_length=12", f"max_steps={STEPS}", "plot_steps=100"]
    args += ["rollout.engines=2", "weight_sync.backend=gloo", f"output_dir={run}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "train", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    metrics_file, deadline = run / "metrics.jsonl", time.monotonic() + 400
    while not (metrics_file.is_file() and metrics_file.read_text().count("\n") >= KILL_AFTER):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended or stalled early"
        time.sleep(0.05)
    victims = _engine_processes_of(proc.pid)
    assert len(victims) == 2
    for victim in victims:  # SIGKILL from outside: both are replaced (the run waits for one), the group's members change
        victim.kill()
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]

    steps = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    assert [m["step"] for m in steps] == list(range(1, STEPS + 1))
    for m in steps[:KILL_AFTER]:
        assert m["weight_sync/transport"] == "gloo"
    for m in steps:
        assert len(m["weight_sync/checksum"]) == 16 and m["weight_sync/checksum"] != "unverified"
        assert m["sampling/sampling_logp_difference/max"] <= 1e-4, m["step"]
    assert steps[-1]["engine_restarts"] >= 2 and steps[-1]["engines"] == 2
    # After the replacement, a sync of both engines went over a new gloo group again (not the object store).
    replaced_at = next(m["step"] for m in steps if m["engine_restarts"] >= 1)
    assert any(m["weight_sync/transport"] == "gloo" and m["engines"] == 2 for m in steps if m["step"] > replaced_at)
