"""The run's gateway token travels to every engine but never shows in a repr, a log line or an error."""

from orchestrator.contracts.agents import AgentConfig, AgentUse


def test_the_runs_token_is_never_in_a_repr():
    from workers.agents.gateway import _Open
    from workers.agents.session import Session

    token = "s3cret-run-token"
    use = AgentUse(config=AgentConfig(fn="builtin:lookup"), token=token)
    assert use.token == token and token not in repr(use) and token not in str(use)
    opened = _Open(Session("g0-s0-1", 16, 3, "split"), token, None, 0, 0)
    assert token not in repr(opened)
