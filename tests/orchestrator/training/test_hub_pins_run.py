"""`train` on a Hub model pinned by `model_revision` (real Ray, vLLM, TRL), offline from a Hub cache
written by hand: the tag v1 holds the built-in tiny model, while the default branch has moved to a
commit that does not load. The run trains only if every load reads the pinned commit; the run folder
records it; and once the tag is moved, `--resume` is refused in one line before Ray starts."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from orchestrator.builtin.tiny_model import tiny_model
from tests.orchestrator.hub_cache import hub_repo, move_refs
from tests.orchestrator.training.short_run import ARGS, metrics

pytestmark = pytest.mark.engines

GOOD, BROKEN = "1" * 40, "2" * 40


def test_a_run_trains_the_pinned_commit_and_a_resume_refuses_a_moved_tag(tmp_path):
    built = tiny_model()
    model = tmp_path / "tiny"
    shutil.copytree(built.model_dir, model)
    shutil.copytree(built.tokenizer_dir, model, dirs_exist_ok=True)  # the learner tokenizer (<search>) beside it
    repo = hub_repo(tmp_path / "hub", "org/tiny", {GOOD: model, BROKEN: {"config.json": "{"}}, {"main": BROKEN, "v1": GOOD})
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    run = tmp_path / "run"

    def train(*args):
        command = [sys.executable, "-m", "orchestrator", "train", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, env=environment)

    pinned = ["model=org/tiny", "model_revision=v1", "save_steps=1"]
    first = train(*ARGS, "max_steps=2", *pinned, f"output_dir={run}")
    assert first.returncode == 0, first.stderr[-3000:]
    assert [m["step"] for m in metrics(run)] == [1, 2]
    assert json.loads((run / "hub_pins.json").read_text())["model_revision"]["commit"] == GOOD

    move_refs(repo, {"v1": BROKEN})
    started = time.monotonic()
    resumed = train("--resume", str(run), "max_steps=3")
    assert resumed.returncode == 2, resumed.stderr[-3000:]
    assert time.monotonic() - started < 60  # refused at preflight, before Ray
    assert f"model_revision: org/tiny at 'v1' is now commit {BROKEN}, but the run started on commit {GOOD}" in resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert len(metrics(run)) == 2
