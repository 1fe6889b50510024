"""Host memory a process has freed goes back to the system.

glibc keeps freed heap pages for reuse: after a weight load (the vLLM worker) or an optimizer step
(the learner), what the phase freed would stay counted against the node until the process needs it
again, while the node's other processes (engines, the learner, Ray's object store) peak in between.
"""

from __future__ import annotations

import ctypes
import functools


def return_freed_memory() -> None:
    """`malloc_trim(0)`: hand the freed heap pages back; a no-op where the C library is not glibc."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """glibc's `malloc_trim`, looked up once per process; None where the C library is not glibc."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
