"""What a rollout engine leaves in /dev/shm when it is killed, and removing it afterwards.

vLLM's CPU engine talks to its worker process through `multiprocessing.shared_memory` ring buffers
(`/dev/shm/psm_*`) and, while starting, a multiprocessing lock (`/dev/shm/sem.mp-*`). The process
that created one removes it when it exits normally; one that is SIGKILLed (an engine that crashed,
or one that Ray killed along with its actor) leaves it behind. On Kubernetes /dev/shm is a small
memory-backed volume, so a run that replaces engines many times would fill it.

So an engine names, once it is up, the entries its processes map that did not exist when its actor
started (`owned_entries`): those are its own, never another engine's or the node's. With them go the
entries of vLLM's kinds that appeared since and that no process maps at all (`unmapped_entries`):
vLLM's worker leaves a semaphore so, for the multiprocessing resource tracker to unlink when the
worker exits, and Ray kills the tracker together with the actor's other child processes. Nothing can
be using an entry no process maps (a semaphore is mapped before it is named, under a temporary name,
so mappings are matched by inode: `mapped_inodes`), so removing one that another engine left is
harmless. Once the engine
is dead, `remove_leftovers`, run on the engine's node, removes those of them that no live process
maps any more. The engine also writes them down on its node (`write_claim`), for when no driver is
left to ask for that (it was killed, and Ray with it): the next engine to start there `sweep`s what
engines whose processes are all gone left behind.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from workers.rollout.processes import kill_survivors, running

SHM = Path("/dev/shm")
VLLM_PREFIXES = ("psm_", "sem.mp-")  # the kinds of entry vLLM's processes create (see above)
PROC = Path("/proc")
CLAIMS = Path(tempfile.gettempdir()) / "rollout-shm-claims"
DELETED = " (deleted)"


def entries(shm_dir: Path = SHM) -> set[str]:
    """The names in /dev/shm now (none where there is no /dev/shm)."""
    try:
        return set(os.listdir(shm_dir))
    except FileNotFoundError:
        return set()


def mapped_inodes(maps: str, shm_dir: Path = SHM) -> set[int]:
    """Inodes of the `shm_dir` files that one `/proc/<pid>/maps` text maps. By inode, not name: a
    semaphore's creator maps it under the temporary name glibc made it with before naming it
    (`sem.XXXXXX (deleted)` in its maps, while the file is `sem.mp-*`)."""
    prefix = f"{shm_dir}/"
    inodes = set()
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)  # address perms offset dev inode [path, which may hold spaces]
        if len(fields) == 6 and fields[5].startswith(prefix) and "/" not in fields[5][len(prefix) :].removesuffix(DELETED):
            inodes.add(int(fields[4]))
    return inodes


def mapped_by(pids: Iterable[int], proc: Path = PROC, shm_dir: Path = SHM) -> set[str]:
    """The `shm_dir` entries that any of `pids` maps; processes that are gone map nothing."""
    inodes = set()
    for pid in pids:
        try:
            inodes |= mapped_inodes((proc / str(pid) / "maps").read_text(errors="replace"), shm_dir)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    names = set()
    for name in entries(shm_dir) if inodes else ():
        try:
            if (shm_dir / name).stat().st_ino in inodes:
                names.add(name)
        except FileNotFoundError:  # removed meanwhile
            pass
    return names


def all_pids(proc: Path = PROC) -> list[int]:
    try:
        return [int(entry.name) for entry in proc.iterdir() if entry.name.isdigit()]
    except FileNotFoundError:
        return []


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (vLLM's engine process, and the worker processes it starts)."""
    import psutil

    root = psutil.Process(pid)
    return [root.pid, *(child.pid for child in root.children(recursive=True))]


def owned_entries(pids: list[int], existed: set[str], proc: Path = PROC, shm_dir: Path = SHM) -> list[str]:
    """The entries that `pids` (an engine's `process_tree`) map and that were not there before
    (`existed`, taken when the engine's actor started): what killing them would leave behind."""
    return sorted(mapped_by(pids, proc, shm_dir) - existed)


def unmapped_entries(existed: set[str], proc: Path = PROC, shm_dir: Path = SHM) -> list[str]:
    """The entries of vLLM's kinds that are not in `existed` and that no live process maps (see above)."""
    appeared = {name for name in entries(shm_dir) - existed if name.startswith(VLLM_PREFIXES)}
    return sorted(appeared - mapped_by(all_pids(proc), proc, shm_dir)) if appeared else []


def write_claim(processes: list, names: list[str], claims_dir: Path = CLAIMS) -> Path:
    """Write down on this node that `names` belong to `processes` ((pid, start time) pairs,
    processes.py; the first is the engine's actor)."""
    claims_dir.mkdir(parents=True, exist_ok=True)
    path = claims_dir / f"{processes[0][0]}.json"
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps({"processes": processes, "names": names}))
    partial.replace(path)  # a sweep never reads half a claim
    return path


def sweep(claims_dir: Path = CLAIMS, proc: Path = PROC, shm_dir: Path = SHM) -> list[str]:
    """Clean up after engines of this node whose actor process is gone: end their processes that
    still run (processes.py) and remove what they left here, and their claims; returns the entries
    removed. A claim whose actor still runs is another engine's, alive."""
    removed = []
    for path in sorted(claims_dir.glob("*.json")):
        try:
            claim = json.loads(path.read_text())
            processes = [tuple(process) for process in claim["processes"]]
        except (OSError, ValueError, KeyError, TypeError):  # another sweep took it meanwhile, or not a claim
            continue
        if running(processes[:1]):
            continue
        kill_survivors(processes[1:])
        removed += remove_leftovers(claim["names"], timeout_s=0, proc=proc, shm_dir=shm_dir)
        path.unlink(missing_ok=True)
    return removed


def remove_leftovers(
    names: Iterable[str], timeout_s: float = 30.0, poll_s: float = 0.5, proc: Path = PROC, shm_dir: Path = SHM
) -> list[str]:
    """Remove `names` from `shm_dir` as soon as no live process maps them, and return those removed.

    A killed engine's processes may take a moment to exit, so entries still mapped are looked at
    again until `timeout_s`; one still mapped then (a process that survived, or that shares it) is
    left alone. Names that are already gone are skipped."""
    remaining = set(names)
    removed = []
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = {name for name in remaining if (shm_dir / name).exists()}
        in_use = mapped_by(all_pids(proc), proc, shm_dir) if remaining else set()
        for name in sorted(remaining - in_use):
            try:
                (shm_dir / name).unlink()
                removed.append(name)
            except OSError:  # gone meanwhile, or not ours to remove
                pass
        remaining &= in_use
        if not remaining or time.monotonic() >= deadline:
            return removed
        time.sleep(poll_s)


def clean_up_after(processes: list, names: list[str], timeout_s: float) -> tuple[list[int], list[str]]:
    """On a killed engine's node: end its processes that still run (processes.py), then remove its
    entries once no process maps them. Returns (pids killed, entries removed)."""
    began = time.monotonic()
    killed = kill_survivors(processes, timeout_s=timeout_s)
    return killed, remove_leftovers(names, timeout_s=max(0.0, timeout_s - (time.monotonic() - began)))
