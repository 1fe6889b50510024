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
