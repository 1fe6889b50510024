"""What a driver killed mid-write leaves in its run folder, and how `--resume` treats it: a
half-written checkpoint is never picked and is cleared away, as are half-written rollout files
and a metrics line cut short."""

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.contracts.errors import UserError
from orchestrator.training.run_dir import ResumeState, RunDir


def _save(run: RunDir, tiny, step: int) -> None:
    def save_learner(folder: str) -> None:  # what the learner's save writes, minus a real optimizer
        import torch

        shutil.copytree(tiny.model_dir, folder, dirs_exist_ok=True)
        shutil.copytree(tiny.tokenizer_dir, folder, dirs_exist_ok=True)
        torch.save({"policy_version": step}, f"{folder}/learner_state.pt")

    run.write_checkpoint(step, save_learner, ResumeState(step=step, stream_position=2 * step, policy_version=step))


@pytest.fixture
def run(tmp_path):
    run = RunDir.create(str(tmp_path / "run"))
    run.prepare({"max_steps": 4})
    return run


def test_resume_skips_a_half_written_checkpoint_and_clears_what_the_kill_left(run, tiny):
    _save(run, tiny, 1)
    interrupted = run.checkpoint(2).with_name("step-000002.partial")  # killed inside the learner's save
    shutil.copytree(run.checkpoint(1), interrupted)
    (interrupted / "learner_state.pt").unlink()
    (run.rollouts / "step-000001.parquet").write_bytes(b"PAR1")
    (run.rollouts / "step-000002.parquet.partial").write_bytes(b"PAR1 half")
    records = [json.dumps({"step": 1, "reward_mean": 0.5}), json.dumps({"step": 2, "reward_mean": 0.6})]
    run.metrics.write_text(records[0] + "\n" + records[1] + "\n" + '{"step": 3, "rew')  # cut mid-line

    checkpoint, state = run.latest_checkpoint()
    assert checkpoint == run.checkpoint(1) and state == ResumeState(step=1, stream_position=2, policy_version=1)
    run.forget_after(state.step)
    assert run.metrics.read_text() == records[0] + "\n"
    assert sorted(p.name for p in run.rollouts.iterdir()) == ["step-000001.parquet"]
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["step-000001"]


def test_a_checkpoint_save_is_atomic(run, tiny):
    def dies_midway(folder: str) -> None:
        (Path(folder) / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt  # as a second Ctrl-C inside the save would

    _save(run, tiny, 1)
    with pytest.raises(KeyboardInterrupt):
        run.write_checkpoint(2, dies_midway, ResumeState(step=2, stream_position=4, policy_version=2))
    assert not run.checkpoint(2).exists()
    assert run.latest_checkpoint()[0] == run.checkpoint(1)


def test_a_damaged_metrics_line_before_the_last_is_an_error(run):
    run.metrics.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(UserError, match=r"metrics.jsonl:2: not a metrics record"):
        run.forget_after(1)
