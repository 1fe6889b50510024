"""The processes a rollout engine leaves running when it is killed, and ending them.

Ray kills an engine's actor process; vLLM's engine process (and, on a GPU, its worker processes) are
its children and do not always follow it. One that is stopped (a wedged engine; SIGSTOP) never runs
its own exit handling, and one whose node lost its raylet is reparented to init and keeps its memory,
a GPU's included, which would block the replacement engine. So an engine's processes are named by pid
and start time (a pid is reused), and once the engine is killed, what still runs of them is
SIGKILLed (shared_memory.py's clean-up, reaper.py): SIGKILL is the one signal a stopped process takes.

All but one kind: Python's multiprocessing resource tracker, which vLLM's processes share. It holds
nothing of the engine's; it unlinks the named semaphores (`/dev/shm/sem.mp-*`) and shared memory that
the processes it serves registered and did not release, once the last of them is gone, and then
exits. Killed with them, it would leave those entries in /dev/shm for good.

The start time is the kernel's own: clock ticks since boot (`/proc/PID/stat`, field 22), which does
not move when the wall clock is stepped, as a start time in seconds since the epoch would.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

Process = tuple[int, int]  # (pid, start time in clock ticks since boot)
PROC = Path("/proc")


def _stat(pid: int, proc: Path = PROC) -> tuple[str, int] | None:
    """(state, start ticks) of a running pid, None if there is none."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name, in parentheses, may hold spaces
    return fields[0], int(fields[19])  # fields 3 and 22 of proc(5)


def describe(pids: list[int]) -> list[Process]:
    """`pids` with their start times (those already gone are left out)."""
    described = []
    for pid in pids:
        stat = _stat(pid)
        if stat is not None:
            described.append((pid, stat[1]))
    return described


def running(processes: list[Process]) -> list[Process]:
    """Those of `processes` that still run as the same process (same pid and start time, not a zombie)."""
    alive = []
    for pid, started in processes:
        stat = _stat(pid)
        if stat is not None and stat[1] == started and stat[0] != "Z":
            alive.append((pid, started))
    return alive


def is_resource_tracker(pid: int, proc: Path = PROC) -> bool:
    """Whether `pid` is a multiprocessing resource tracker (see above)."""
    try:
        command = (proc / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return b"multiprocessing.resource_tracker" in command


def kill_survivors(processes: list[Process], timeout_s: float = 10.0) -> list[int]:
    """SIGKILL those of `processes` still running, resource trackers left to exit on their own (see
    above), and wait (up to `timeout_s`) for them to go; returns the pids killed."""
    alive = [process for process in running(processes) if not is_resource_tracker(process[0])]
    for pid, _ in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + timeout_s
    while running(alive) and time.monotonic() < deadline:
        _reap(alive)
        time.sleep(0.05)
    return [pid for pid, _ in alive]


def _reap(processes: list[Process]) -> None:
    """Collect those that are this process's own children (a zombie of ours never goes by itself)."""
    for pid, _ in processes:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
