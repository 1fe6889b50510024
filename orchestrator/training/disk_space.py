"""Telling a full disk from other write failures, and saying where it is full.

A checkpoint is written by the learner's actor: a lack of space reaches the driver as a Ray error,
with the OS's error as its cause or only as text in the actor's traceback, or as torch.save's check
of a short write, which does not say why the write was short. So the words are looked for along the
whole chain, and a short write counts as a full disk only where the filesystem is nearly full.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded")
SHORT_WRITE_TEXT = ("unexpected pos", "file write failed")
NEARLY_FULL = 1 << 20  # bytes: below this a filesystem counts as full when the error does not say why


def short_of_space(error: BaseException, folder: Path, path_known: bool = True) -> bool:
    """Whether `error` is a write into `folder` failing for lack of space: the OS said so somewhere in
    its chain (a Ray error holds the actor's exception as `cause` and its traceback as text), or
    torch.save found its write short and `folder`'s filesystem is nearly full. When the error does not
    say which file failed (`path_known` False), the OS's word counts only if that filesystem is nearly
    full too: it may have come from another one."""
    chain, link = [], error
    while isinstance(link, BaseException) and all(link is not seen for seen in chain):
        chain.append(link)
        link = link.__cause__ or link.__context__ or getattr(link, "cause", None)
    text = "\n".join(str(link) for link in chain)
    os_said = any(isinstance(link, OSError) and link.errno in NO_SPACE_ERRNOS for link in chain)
    os_said = os_said or any(words in text for words in NO_SPACE_TEXT)
    if os_said and path_known:
        return True
    if os_said or any(words in text for words in SHORT_WRITE_TEXT):
        return shutil.disk_usage(existing(folder)).free < NEARLY_FULL
    return False


def size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def size_text(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e10 else f"{size / 1e6:.1f} MB"


def existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mount_point(path: Path) -> Path:
    path = path.resolve()
    while not os.path.ismount(path):
        path = path.parent
    return path
