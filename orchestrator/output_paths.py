"""Check, before any work starts, that an output path (a run folder, a Parquet file) can be
created: an hour of generation must not end in "Not a directory" when the result is written.

Nothing is created here; the checks only look at the path's nearest existing ancestor.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.contracts.errors import UserError


def check_creatable(path: Path, key: str, *, folder: bool) -> None:
    """`path` (a folder when `folder`, else a file) can be created or written where it is, or a
    UserError names `key`, the part of the path in the way and what was expected."""
    kind = "a folder" if folder else "a file"
    if path.exists():
        if folder and not path.is_dir():
            raise UserError(f"{key} {path} is a file (expected {kind} to write the run into)")
        if not folder and path.is_dir():
            raise UserError(f"{key} {path} is a folder (expected {kind} path)")
        target = path if folder else path.parent
    else:
        target = _nearest_existing(path.parent)
        if not target.is_dir():
            raise UserError(f"{key} {path}: {target} is a file, so nothing can be created under it (expected a folder there)")
    # os.access asks the kernel, so it sees read-only mounts too; a process run as root passes it anyway
    if not os.access(target, os.W_OK | os.X_OK):
        raise UserError(f"{key} {path}: no permission to write in {target} (choose a writable location)")


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
