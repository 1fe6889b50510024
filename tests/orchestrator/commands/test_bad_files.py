"""Every path and file a user hands `train` or `generate` is checked before Ray starts: a damaged or
misplaced one exits with 2 and one `error:` line naming the key or flag, the file (and line where
one applies) and what was expected; no traceback, and nothing is left on disk. Run as a user runs
it: the CLI in a subprocess."""

import json
import os
import shutil
import subprocess
import sys

import pytest


def _cli(*args):
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def _train(tmp_path, *overrides):
    err = _cli("train", f"output_dir={tmp_path}/run", *overrides)
    assert not (tmp_path / "run").exists(), "a failed check must leave no run folder"
    return err


def _generate(tmp_path, *args, out=None):
    out = out or tmp_path / "out.parquet"
    err = _cli("generate", "--out", str(out), *args)
    assert not out.exists() and not list(tmp_path.rglob("*.partial"))
    return err


@pytest.fixture
def model_copy(tiny, tmp_path):
    """A copy of the tiny model folder (with the learner tokenizer) to damage."""

    def copy(name: str):
        folder = tmp_path / name
        shutil.copytree(tiny.model_dir, folder)
        for file in tiny.tokenizer_dir.iterdir():
            shutil.copy(file, folder / file.name)
        return folder

    return copy


@pytest.fixture
def not_utf8(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps({"prompt": "ok"}).encode() + b'\n{"prompt": "caf\xe9"}\n')
    return path


@pytest.fixture
def truncated_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "prompts.parquet"
    pq.write_table(pa.table({"prompt": ["Q: what is apple ? A:"] * 50}), path)
    os.truncate(path, path.stat().st_size - 16)  # the footer is gone, as after a copy cut short
    return path


def test_output_dir_under_a_regular_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    err = _cli("train", f"output_dir={tmp_path}/afile/run")
    assert (
        err
        == f"error: output_dir {tmp_path}/afile/run: {tmp_path}/afile is a file, so nothing can be created under it (expected a folder there)"
    )
    err = _cli("train", f"output_dir={tmp_path}/afile")
    assert err == f"error: output_dir {tmp_path}/afile is a file (expected a folder to write the run into)"
    assert (tmp_path / "afile").read_text() == "x"


def test_prompt_file_that_is_not_utf8_names_file_and_line(tmp_path, not_utf8):
    err = _train(tmp_path, f"prompts={not_utf8}")
    assert err == f"error: {not_utf8}:2: not valid UTF-8 (byte 0xe9 at column 16); expected UTF-8 text, one JSON object per line"


def test_truncated_parquet_prompt_file(tmp_path, truncated_parquet):
    err = _train(tmp_path, f"prompts={truncated_parquet}")
    assert err.startswith(f"error: {truncated_parquet}: not a readable Parquet file (")
    assert err.endswith("expected a complete Parquet file")


def test_model_folder_without_weights(tmp_path, model_copy):
    folder = model_copy("no-weights")
    (folder / "model.safetensors").unlink()
    err = _train(tmp_path, f"model={folder}")
    assert err == (
        f"error: model {folder}: no weight file (expected model.safetensors, sharded *.safetensors with their "
        "index, or pytorch_model.bin)"
    )


def test_model_folder_with_truncated_weights(tmp_path, model_copy):
    folder = model_copy("truncated")
    weights = folder / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    err = _train(tmp_path, f"model={folder}")
    assert err.startswith(f"error: model {folder}: model.safetensors is not a complete safetensors file (")
    assert "re-copy or re-save the model" in err


def test_model_folder_with_a_broken_config(tmp_path, model_copy):
    folder = model_copy("bad-config")
    (folder / "config.json").write_text('{\n  "model_type": "llama",\n  "vocab_size": \n}\n')
    err = _train(tmp_path, f"model={folder}")
    assert err == f"error: model {folder}: config.json:4: invalid JSON (Expecting value); expected a transformers model config"


def test_tokenizer_folders_that_are_not_tokenizers(tmp_path, model_copy):
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "cat.png").write_bytes(b"\x89PNG")
    err = _train(tmp_path, f"tokenizer={tmp_path}/pictures")
    assert err.startswith(f"error: cannot load a tokenizer from {tmp_path}/pictures: no tokenizer file there (expected")
    folder = model_copy("bad-tokenizer")
    (folder / "tokenizer.json").write_text('{"version": "1.0",\n "model": \n')
    err = _train(tmp_path, f"tokenizer={folder}")
    assert err.startswith(f"error: cannot load a tokenizer from {folder}: tokenizer.json:3: invalid JSON (Expecting value)")


def test_generate_checks_its_paths_before_ray(tmp_path, not_utf8, truncated_parquet, model_copy):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "out.parquet"
    err = _generate(tmp_path, out=out)
    assert err == f"error: --out {out}: {tmp_path}/afile is a file, so nothing can be created under it (expected a folder there)"
    assert f"error: {not_utf8}:2: not valid UTF-8" in _generate(tmp_path, "--prompts", str(not_utf8))
    assert f"error: {truncated_parquet}: not a readable Parquet file" in _generate(tmp_path, "--prompts", str(truncated_parquet))
    folder = model_copy("truncated")
    os.truncate(folder / "model.safetensors", 1000)
    assert f"error: --model {folder}: model.safetensors is not a complete safetensors file" in _generate(
        tmp_path, "--model", str(folder)
    )
    assert f"error: --model path {tmp_path}/nope does not exist" in _generate(tmp_path, "--model", f"{tmp_path}/nope")
    (tmp_path / "empty").mkdir()
    err = _generate(tmp_path, "--tokenizer", str(tmp_path / "empty"))
    assert err.startswith(f"error: cannot load a tokenizer from {tmp_path}/empty: no tokenizer file there")


@pytest.fixture
def killed_run(tiny, tmp_path):
    """A run folder as a killed driver leaves it: checkpoint step 1 complete, step 2 half-written."""
    import torch

    run = tmp_path / "killed"
    (run / "rollouts").mkdir(parents=True)
    (run / "config.yaml").write_text(f"output_dir: {run}\nmax_steps: 3\n")
    for step in (1, 2):
        folder = run / "checkpoints" / f"step-{step:06d}"
        shutil.copytree(tiny.model_dir, folder)
        for file in tiny.tokenizer_dir.iterdir():
            shutil.copy(file, folder / file.name)
        torch.save({"policy_version": step}, folder / "learner_state.pt")
        (folder / "orchestrator_state.json").write_text(
            json.dumps({"step": step, "stream_position": 4 * step, "policy_version": step})
        )
    (run / "checkpoints" / "step-000002").rename(run / "checkpoints" / "step-000002.partial")
    return run


def _resume(run):
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    err = _cli("train", "--resume", str(run))
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before, "a refused resume must change nothing"
    return err


def test_resume_refuses_a_checkpoint_without_learner_state(killed_run):
    (killed_run / "checkpoints" / "step-000001" / "learner_state.pt").unlink()
    err = _resume(killed_run)
    assert err == f"error: --resume {killed_run}: checkpoint step-000001 is damaged: learner_state.pt is missing"


def test_resume_refuses_a_learner_state_that_would_run_code_when_unpickled(killed_run):
    import torch

    # os.system, which pickles by reference as posix.system (print would not do: Ray replaces it in a process
    # where it ran, and then its replacement is pickled)
    torch.save({"policy_version": 1, "scheduler": os.system}, killed_run / "checkpoints" / "step-000001" / "learner_state.pt")
    err = _resume(killed_run)
    assert err == (
        f"error: --resume {killed_run}: checkpoint step-000001 is damaged: learner_state.pt holds pickled objects other "
        f"than tensors and plain values ({os.system.__module__}.system), which this project never writes; it is not "
        "loaded, since unpickling them could run code"
    )


def test_resume_refuses_truncated_weights_and_names_the_older_checkpoint(killed_run):
    step3 = killed_run / "checkpoints" / "step-000003"
    shutil.copytree(killed_run / "checkpoints" / "step-000001", step3)
    os.truncate(step3 / "model.safetensors", 4096)
    err = _resume(killed_run)
    assert err.startswith(
        f"error: --resume {killed_run}: checkpoint step-000003 is damaged: model.safetensors is not a complete safetensors file"
    )
    assert err.endswith("; delete that folder to resume from step-000001")


def test_resume_with_only_a_half_written_checkpoint(killed_run):
    shutil.rmtree(killed_run / "checkpoints" / "step-000001")
    err = _resume(killed_run)
    assert err.startswith(
        f"error: --resume {killed_run}: no complete checkpoint in {killed_run}/checkpoints (the run stopped before"
    )


def test_resume_refuses_to_switch_the_learner_to_sharded(killed_run):
    checkpoint = killed_run / "checkpoints" / "step-000001"  # written by a learner holding the whole model
    before = sorted(str(p.relative_to(killed_run)) for p in killed_run.rglob("*"))
    err = _cli("train", "--resume", str(killed_run), "learner.workers=2", "learner.fsdp=true")
    assert err == f"error: {checkpoint} was written with learner.fsdp=false: resume with learner.fsdp=false"
    assert sorted(str(p.relative_to(killed_run)) for p in killed_run.rglob("*")) == before


def test_resume_of_a_folder_that_is_not_a_run(tmp_path):
    assert (
        _cli("train", "--resume", str(tmp_path / "nope"))
        == f"error: --resume {tmp_path}/nope does not exist (expected the output_dir of a train run)"
    )
    assert (
        _cli("train", "--resume", str(tmp_path))
        == f"error: --resume {tmp_path}: no config.yaml there (expected the output_dir of a train run)"
    )


def test_config_file_that_is_not_utf8(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_bytes(b"max_steps: 3\n# caf\xe9\n")
    assert _train(tmp_path, "--config", str(config)) == f"error: {config}:2: not valid UTF-8 (expected a UTF-8 YAML file)"
