"""A small tmpfs for the tests that run out of disk space. Mounting needs root (CAP_SYS_ADMIN): where it
fails, the test is skipped and says why."""

import contextlib
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(folder: Path, size: str):
    """`folder` as a tmpfs of `size` (mount's notation: 2m, 512k) while the block runs."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        pytest.skip("no mount command here to make a small filesystem to fill")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs to fill (needs root): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], check=False).returncode != 0:
            subprocess.run(["umount", "--lazy", str(folder)], check=True)  # a process that still holds a file


def resize(folder: Path, size: str) -> None:
    """Give the mounted tmpfs `size` in all, its files kept (space freed, as a user would)."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)
