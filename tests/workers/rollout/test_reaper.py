"""An engine's reaper ends the engine's processes once its actor is gone, and only then; real `sleep`
processes stand in for the actor and for vLLM's."""

import subprocess
import time

from workers.rollout import reaper
from workers.rollout.processes import describe


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "600"])


def test_the_engines_processes_end_once_its_actor_is_gone():
    actor, engine, worker = _sleeper(), _sleeper(), _sleeper()
    try:
        watcher = reaper.start(*describe([actor.pid]), describe([engine.pid, worker.pid]))
        time.sleep(1.5)
        assert engine.poll() is None and worker.poll() is None, "killed while the actor still ran"
        actor.kill()
        actor.wait()
        assert watcher.wait(timeout=15) == 0
        time.sleep(0.2)
        assert engine.poll() is not None and worker.poll() is not None
    finally:
        for process in (actor, engine, worker):
            process.kill()
            process.wait()


def test_the_reaper_goes_when_the_engine_stops_by_itself():
    actor, engine = _sleeper(), _sleeper()
    try:
        watcher = reaper.start(*describe([actor.pid]), describe([engine.pid]))
        engine.kill()
        engine.wait()
        assert watcher.wait(timeout=15) == 0 and actor.poll() is None
    finally:
        for process in (actor, engine):
            process.kill()
            process.wait()
