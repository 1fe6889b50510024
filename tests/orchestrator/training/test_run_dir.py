"""What a driver killed mid-write leaves in its run folder, and how `--resume` treats it: a
half-written checkpoint is never picked and is cleared away, as are half-written rollout files
and a metrics line cut short. How many checkpoints stay (save_total_limit), and what a full disk
does: one line naming the file and the way to resume, and no half-written checkpoint."""

import errno
import json
import shutil
import traceback
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from orchestrator.contracts.errors import RunError, UserError
from orchestrator.rollout.parquet import write_parquet
from orchestrator.training.run_dir import ResumeState, RunDir
from tests.orchestrator.training.small_disk import small_disk


def _learner_save(tiny, step: int, optimizer_floats: int = 0):
    def save_learner(folder: str) -> None:  # what the learner's save writes, with a stand-in optimizer
        import torch

        shutil.copytree(tiny.model_dir, folder, dirs_exist_ok=True)
        shutil.copytree(tiny.tokenizer_dir, folder, dirs_exist_ok=True)
        torch.save({"policy_version": step, "exp_avg": torch.zeros(optimizer_floats)}, f"{folder}/learner_state.pt")

    return save_learner


def _state(step: int) -> ResumeState:
    return ResumeState(step=step, stream_position=2 * step, policy_version=step)


def _save(run: RunDir, tiny, step: int, keep: int | None = None) -> None:
    run.write_checkpoint(step, _learner_save(tiny, step), _state(step), keep=keep)


def _checkpoints(run: RunDir) -> list[str]:
    return sorted(path.name for path in run.checkpoints.iterdir())


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


def test_save_total_limit_keeps_the_newest_checkpoints(run, tiny):
    for step in range(1, 5):
        _save(run, tiny, step, keep=2)
    assert _checkpoints(run) == ["step-000003", "step-000004"]
    assert run.latest_checkpoint()[0] == run.checkpoint(4)


def test_save_total_limit_1_always_keeps_the_checkpoint_just_written(run, tiny):
    _save(run, tiny, 1, keep=1)
    assert _checkpoints(run) == ["step-000001"]
    _save(run, tiny, 2, keep=1)
    assert _checkpoints(run) == ["step-000002"]


def test_save_total_limit_counts_the_checkpoints_of_the_run_before_a_resume(run, tiny):
    for step in (1, 2, 3):  # the run before: no limit
        _save(run, tiny, step)
    _, state = run.latest_checkpoint()
    run.forget_after(state.step)
    _save(run, tiny, 4, keep=2)  # resumed with save_total_limit=2
    assert _checkpoints(run) == ["step-000003", "step-000004"]


def _fills_the_disk(folder: str) -> None:
    (Path(folder) / "model.safetensors").write_bytes(b"half")
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_during_a_save_is_one_line_and_leaves_no_partial_checkpoint(run, tiny):
    _save(run, tiny, 1, keep=1)
    with pytest.raises(RunError) as raised:
        run.write_checkpoint(2, _fills_the_disk, _state(2), keep=1)
    message = str(raised.value)
    assert message.startswith(f"no space left on device writing checkpoints/step-000002 ({run.checkpoint(2).absolute()}): ")
    assert message.endswith(f"then resume from step-000001 with: python -m orchestrator train --resume {run.root}")
    assert "\n" not in message
    assert _checkpoints(run) == ["step-000001"]  # nothing deleted before a new checkpoint is complete


def _ray_error(cause: Exception) -> Exception:
    """What `ray.get` raises when the learner actor's `save` raised `cause`."""
    from ray.exceptions import RayTaskError

    try:
        raise cause
    except type(cause):
        return RayTaskError("Learner.save", traceback.format_exc(), cause).as_instanceof_cause()


def test_torchs_short_write_is_a_full_disk_only_when_the_disk_is_full(run, monkeypatch):
    """torch.save says "unexpected pos" and not why: the free space of the checkpoint's filesystem decides."""
    free = {"bytes": 10**12}
    usage = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(path)._replace(free=free["bytes"]))

    def fails_with(error: Exception):
        def save_learner(folder: str) -> None:
            (Path(folder) / "model.safetensors").write_bytes(b"half")
            raise _ray_error(error)

        return save_learner

    short = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    with pytest.raises(RuntimeError, match="unexpected pos") as raised:
        run.write_checkpoint(1, fails_with(short), _state(1))
    assert not isinstance(raised.value, RunError)  # room to spare: some other fault, said as it is
    free["bytes"] = 4096
    with pytest.raises(ValueError, match="not a disk problem"):
        run.write_checkpoint(1, fails_with(ValueError("not a disk problem")), _state(1))
    with pytest.raises(RunError, match=r"^no space left on device writing checkpoints/step-000001 .* nothing to resume\)$"):
        run.write_checkpoint(1, fails_with(short), _state(1))
    assert _checkpoints(run) == []


def test_a_checkpoint_that_cannot_fit_fails_before_the_learner_writes_it(run, tiny, monkeypatch):
    _save(run, tiny, 1)
    usage = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(path)._replace(free=1000))
    written = []
    with pytest.raises(RunError, match=r"step-000002 .*: 0\.0 MB free of .*, and the last checkpoint took \d+\.\d MB; free"):
        run.write_checkpoint(2, written.append, _state(2))
    assert not written and _checkpoints(run) == ["step-000001"]


def test_a_checkpoint_too_big_for_a_real_disk_is_removed_and_said_in_one_line(tmp_path, tiny):
    with small_disk(tmp_path / "disk", "1m") as disk:
        run = RunDir.create(str(disk / "run"))
        run.prepare({"max_steps": 1})
        with pytest.raises(RunError, match=r"^no space left on device writing checkpoints/step-000001 \(") as raised:
            run.write_checkpoint(1, _learner_save(tiny, 1, optimizer_floats=300_000), _state(1))  # torch.save's part overflows
        assert f": 0.0 MB free of 1.0 MB on {disk};" in str(raised.value)  # the room there was when it failed
        assert _checkpoints(run) == []


def test_a_rollout_file_that_does_not_fit_is_named_and_left_nowhere(tmp_path):
    """What the step loop does with a failed write into the run folder (training/loop.py)."""
    with small_disk(tmp_path / "disk", "256k") as disk:
        run = RunDir.create(str(disk / "run"))
        run.prepare({"max_steps": 1})
        table = pa.table({"logprobs": np.random.default_rng(0).random(100_000)})
        with pytest.raises(OSError) as raised:
            write_parquet(table, run.rollout_file(3))
        with pytest.raises(RunError) as stopped:
            run.raise_if_disk_full(raised.value, raised.value.filename)
        assert str(stopped.value).startswith(
            f"no space left on device writing rollouts/step-000003.parquet ({run.rollout_file(3).absolute()})"
        )
        assert list(run.rollouts.iterdir()) == []


def test_no_space_elsewhere_is_not_said_to_be_the_run_folders(run):
    """An error that names no file counts as the run folder's only if its filesystem is nearly full."""
    run.raise_if_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    run.raise_if_disk_full(OSError(errno.EACCES, "Permission denied"), run.metrics)
