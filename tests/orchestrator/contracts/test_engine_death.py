"""The one-line reason a dead engine's warning gives: it says when the engine went down with its node."""

from orchestrator.contracts.engine_death import reason

# What Ray 2.60 says for an actor call whose node's raylet was killed (ids shortened)
NODE_LOST = """The actor died unexpectedly before finishing this task.
\tclass_name: RolloutWorker
\tactor_id: b9308d854def663c30aef8a601000000
\tip: 192.0.2.2
The actor died because its node has died. Node Id: d1624691fa6c
\tthe actor's node was terminated unexpectedly: health check failed due to missing too many heartbeats"""


class ActorDiedError(Exception):
    pass


def test_a_lost_node_is_named():
    assert reason(ActorDiedError(NODE_LOST)) == (
        "ActorDiedError: The actor died unexpectedly before finishing this task. "
        "The actor died because its node has died. Node Id: d1624691fa6c"
    )


def test_other_errors_give_their_first_line():
    assert reason(TimeoutError("group 3 missed rollout.request_timeout_s\ndetails")) == (
        "TimeoutError: group 3 missed rollout.request_timeout_s"
    )
    assert reason(RuntimeError()) == "RuntimeError: "
