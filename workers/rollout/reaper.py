"""An engine's reaper: a small process that ends the engine's vLLM processes once its actor is gone.

The actor's node may lose its raylet (the actor's worker process exits, its vLLM processes are
reparented to init and keep their memory, a GPU's included), or the engine may be killed while it
is still starting, before it could name its processes: then no clean-up task knows what to end
(processes.py). So an engine's actor starts this process first thing, in a session of its own. Every
second it notes the actor's descendants (pid and start time) while the actor runs as the same
process; once it does not, it SIGKILLs those still running and exits. It holds no Ray or vLLM state:
the standard library and psutil only.

    python -m workers.rollout.reaper ACTOR_PID START_TICKS
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from workers.rollout.processes import Process, describe, kill_survivors, running

POLL_S = 1.0


def start(actor: Process) -> subprocess.Popen:
    """Start the reaper of `actor`'s descendants (`actor`: an engine's actor process)."""
    root = str(Path(__file__).resolve().parents[2])  # where the `workers` package lives
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(
        [sys.executable, "-m", "workers.rollout.reaper", str(actor[0]), str(actor[1])],
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # not in the actor's process group: whatever ends that group, this outlives it
    )


def descendants(pid: int) -> list[Process]:
    """`pid`'s descendants now, this process left out."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    return describe([child.pid for child in children if child.pid != os.getpid()])


def watch(actor: Process, poll_s: float = POLL_S) -> list[int]:
    """Note `actor`'s descendants while it runs; once it is gone, kill what is left of the last ones
    noted. Returns the pids killed."""
    noted: list[Process] = []
    while running([actor]):
        noted = descendants(actor[0]) or noted
        time.sleep(poll_s)
    return kill_survivors(noted)


if __name__ == "__main__":
    watch((int(sys.argv[1]), int(sys.argv[2])))
