"""A session's own token reaches its agent's client and nothing else: never a repr, a log line or an error."""

from workers.agents.gateway import _Open
from workers.agents.session import Session


def test_a_sessions_token_is_never_in_a_repr():
    token = "s3cret-session-token"
    opened = _Open(Session("g0-s0-1", 16, 3, "split"), token, None, 0, 0)
    assert opened.token == token and token not in repr(opened)
