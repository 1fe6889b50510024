"""An engine's reaper ends the engine's processes once its actor is gone, and only then, including
processes it saw only while the actor ran; a `sleep` stands in for the actor, its children for vLLM's."""

import subprocess
import sys
import time

import psutil

from workers.rollout import reaper
from workers.rollout.processes import describe, running

# An "actor" that starts two "vLLM processes" and waits: they outlive it when it is killed.
ACTOR = "import subprocess, time; [subprocess.Popen(['sleep', '600']) for _ in range(2)]; time.sleep(600)"


def test_the_processes_an_actor_started_end_once_it_is_gone():
    actor = subprocess.Popen([sys.executable, "-c", ACTOR])
    try:
        watcher = reaper.start(describe([actor.pid])[0])
        deadline = time.monotonic() + 10
        while len(psutil.Process(actor.pid).children()) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        engine = describe([child.pid for child in psutil.Process(actor.pid).children()])
        time.sleep(2.5)  # the reaper notes them
        assert len(running(engine)) == 2, "killed while the actor still ran"
        actor.kill()
        actor.wait()
        assert watcher.wait(timeout=15) == 0
        deadline = time.monotonic() + 5
        while running(engine) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running(engine) == [], "the actor's processes outlived it"
    finally:
        actor.kill()
        actor.wait()
        for child in psutil.Process().children(recursive=True):
            if "sleep" in child.name():
                child.kill()
