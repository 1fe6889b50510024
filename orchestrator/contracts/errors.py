"""Errors meant for the user: the CLI prints their message (no traceback) and exits with 2."""


class UserError(Exception):
    """Something the user can fix; the message names what to fix and what was expected."""


class RunError(Exception):
    """A fault that stops a run (a sync past its deadline, wrong weights, no engine left): the CLI
    prints the message without a traceback and exits with 1."""


class LearnerDiedError(RunError):
    """The learner actor is gone (killed, out of memory, crashed) or stuck past a sync's deadline.
    The step loop restarts it from the last checkpoint (`learner.max_restarts`) or stops the run."""


class Terminated(BaseException):
    """The driver got SIGTERM (Kubernetes deleting a RayJob or evicting its pod, `timeout`, a process
    manager): the CLI prints the message and exits with 143, as a process ended by SIGTERM does. Like
    KeyboardInterrupt it is not an `Exception`, so no `except Exception` on the way mistakes it for a
    failure of what it interrupted."""


class CollectiveTimeoutError(RuntimeError):
    """A data-parallel learner rank gave up waiting in a collective call (the process group's timeout):
    some peer neither answered nor died. Raised by the learner actor in place of torch's plain
    RuntimeError, so the driver tells it apart by type (orchestrator/learner/group.py)."""


def first_line(error: BaseException | str, limit: int | None = None) -> str:
    """The first line of an error's message (or of a text) that is not blank, cut to `limit` characters:
    what a one-line report quotes. An error without a message gives its type's name, a blank text 'no detail'."""
    text = error if isinstance(error, str) else str(error)
    line = next((line.strip() for line in text.splitlines() if line.strip()), None)
    if line is None:
        line = "no detail" if isinstance(error, str) else type(error).__name__
    return line if limit is None else line[:limit]
