"""The processes a rollout engine leaves running when it is killed, and ending them.

Ray kills an engine's actor process; vLLM's engine process (and, on a GPU, its worker processes) are
its children and do not always follow it. One that is stopped (a wedged engine; SIGSTOP) never runs
its own exit handling, and one whose node lost its raylet is reparented to init and keeps its memory,
a GPU's included, which would block the replacement engine. So an engine names its processes once it
is up, each with its start time (a pid is reused), and once it is killed, its node SIGKILLs those
still running before removing what they left in /dev/shm (shared_memory.py): SIGKILL is the one
signal a stopped process takes.
"""

from __future__ import annotations

Process = tuple[int, float]  # (pid, start time as psutil reports it)


def describe(pids: list[int]) -> list[Process]:
    """`pids` with their start times (those already gone are left out)."""
    import psutil

    described = []
    for pid in pids:
        try:
            described.append((pid, psutil.Process(pid).create_time()))
        except psutil.Error:
            continue
    return described


def running(processes: list[Process]) -> list:
    """The psutil handles of `processes` that still run as the same process (same pid and start time)."""
    import psutil

    alive = []
    for pid, started in processes:
        try:
            process = psutil.Process(pid)
            if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.Error:
            continue
    return alive


def kill_survivors(processes: list[Process], timeout_s: float = 10.0) -> list[int]:
    """SIGKILL those of `processes` still running and wait (up to `timeout_s`) for them to go;
    returns the pids killed."""
    import psutil

    alive = running(processes)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=timeout_s)
    return [process.pid for process in alive]
