"""An engine's reaper: a small process that ends the engine's vLLM processes once its actor is gone.

The actor's node may lose its raylet (the actor's worker process exits, its vLLM processes are
reparented to init and keep their memory, a GPU's included) or its driver (Ray goes down with it):
then no task runs on the node to clean up after the engine (processes.py). So once an engine is up,
its actor starts this process in a session of its own, with the engine's processes (pid and start
time each). It checks every second whether the actor still runs as the same process, and when it
does not, SIGKILLs those of the engine's processes that still run and exits. It holds no Ray or vLLM
state: the standard library and psutil only.

    python -m workers.rollout.reaper ACTOR_PID:START PID:START [PID:START ...]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from workers.rollout.processes import Process, kill_survivors, running

POLL_S = 1.0


def start(actor: Process, processes: list[Process]) -> subprocess.Popen:
    """Start the reaper of `processes` (an engine's) for `actor` (its actor process)."""
    root = str(Path(__file__).resolve().parents[2])  # where the `workers` package lives
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(
        [sys.executable, "-m", "workers.rollout.reaper", *(f"{pid}:{started!r}" for pid, started in [actor, *processes])],
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # not in the actor's process group: whatever ends that group, this outlives it
    )


def watch(actor: Process, processes: list[Process], poll_s: float = POLL_S) -> list[int]:
    """Wait for `actor` to be gone, then kill what is left of `processes`; returns the pids killed."""
    while running([actor]):
        if not running(processes):  # the engine stopped by itself: nothing left to watch
            return []
        time.sleep(poll_s)
    return kill_survivors(processes)


def _parse(argument: str) -> Process:
    pid, started = argument.split(":", 1)
    return int(pid), float(started)


if __name__ == "__main__":
    actor, *engine = (_parse(argument) for argument in sys.argv[1:])
    watch(actor, engine)
