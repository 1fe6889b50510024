"""Which failures count as an engine's death (by exception type: vLLM's engine errors, timeouts, a
failed weight load, also as the cause Ray's task error carries), and the one-line reason a dead
engine's warning gives: it says when the engine went down with its node."""

import subprocess
import sys
from pathlib import Path

import ray

from orchestrator.contracts.engine_death import WeightLoadFailedError, is_engine_death, reason

# What Ray 2.60 says for an actor call whose node's raylet was killed (ids shortened)
NODE_LOST = """The actor died unexpectedly before finishing this task.
\tclass_name: RolloutWorker
\tactor_id: b9308d854def663c30aef8a601000000
\tip: 192.0.2.2
The actor died because its node has died. Node Id: d1624691fa6c
\tthe actor's node was terminated unexpectedly: health check failed due to missing too many heartbeats"""


class ActorDiedError(ray.exceptions.ActorDiedError):
    """Ray's error, with the text Ray 2.60 gave for a lost node."""

    def __str__(self):
        return NODE_LOST


def test_a_lost_node_is_named():
    assert reason(ActorDiedError()) == (
        "ActorDiedError: The actor died unexpectedly before finishing this task. "
        "The actor died because its node has died. Node Id: d1624691fa6c"
    )


def test_other_errors_give_their_first_line():
    assert reason(RuntimeError(NODE_LOST)) == "RuntimeError: The actor died unexpectedly before finishing this task."
    assert reason(TimeoutError("group 3 missed rollout.request_timeout_s\ndetails")) == (
        "TimeoutError: group 3 missed rollout.request_timeout_s"
    )
    assert reason(RuntimeError()) == "RuntimeError: "


def _task_error(cause: BaseException):
    """What `ray.get` raises when an actor call raised `cause`: a RayTaskError that is also a `cause`."""
    from ray.exceptions import RayTaskError

    return RayTaskError("RolloutWorker.generate", "traceback", cause, proctitle="t", pid=1, ip="192.0.2.2").as_instanceof_cause()


def test_engine_deaths_are_recognised_by_type():
    from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

    # TimeoutError is also asyncio's (the engine's request timeout) since Python 3.11.
    for cause in (EngineDeadError(), EngineGenerateError("g3"), TimeoutError("g3"), WeightLoadFailedError("e1")):
        assert is_engine_death(_task_error(cause)), cause
    assert is_engine_death(TimeoutError("engine 2 missed the sync's deadline"))  # made by the driver, not Ray


def test_other_failures_are_not_engine_deaths_whatever_their_name():
    class EngineDeadError(Exception):  # a user's tool error that only shares vLLM's name
        pass

    assert not is_engine_death(_task_error(EngineDeadError()))
    assert not is_engine_death(_task_error(ValueError("bad reward")))


def test_the_driver_classifies_without_importing_vllm_and_still_recognises_vllms_errors(tmp_path):
    """An engine's error arrives pickled; unpickling it loads vLLM's exception module, which is all the
    check needs, so a driver that never imported vLLM still recognises an engine death."""
    from vllm.v1.engine.exceptions import EngineDeadError

    (tmp_path / "error.bin").write_bytes(_task_error(EngineDeadError()).to_bytes())
    driver = (
        "import sys\n"
        "from ray.exceptions import RayError\n"
        "from orchestrator.contracts.engine_death import is_engine_death\n"
        "assert is_engine_death(TimeoutError()) and not is_engine_death(ValueError())\n"
        "assert 'vllm' not in sys.modules, 'classifying imported vllm'\n"
        f"assert is_engine_death(RayError.from_bytes(open({str(tmp_path / 'error.bin')!r}, 'rb').read()))\n"
    )
    subprocess.run([sys.executable, "-c", driver], check=True, cwd=Path(__file__).resolve().parents[3])
