"""Every use of Ray's private code, checked against the Ray release it was read from (2.60).

- `ray._private.state.state.get_draining_nodes()`: the nodes Ray is draining (a cloud's preemption
  notice through its autoscaler, idle termination, `ray drain-node`) and their deadlines. Ray Core
  knows them, and its autoscaler v2 drains through the same API, but 2.60 has no public call that
  lists them (`ray.nodes()` does not say).

A Ray release may rename or re-sign it without notice, so importing this module checks the installed
Ray and refuses another release series: move the pin only after re-reading `GlobalState` in the new
release's `ray/_private/state.py`.
"""

from __future__ import annotations

import math

import ray

from workers.fences import releases

releases.check_series("ray", ray.__version__, "2.60", "2.61", "ray/_private/state.py (GlobalState.get_draining_nodes)")


def draining_nodes() -> dict[str, float]:
    """Node id (hex) -> the time (time.time()) by which Ray may end it (inf: no deadline), for every
    node Ray is draining."""
    from ray._private.state import state

    return {node: deadline_ms / 1000 if deadline_ms else math.inf for node, deadline_ms in state.get_draining_nodes().items()}
