"""Host memory a process has freed goes back to the system.

glibc keeps freed heap pages for reuse: after a weight load (the vLLM worker) or an optimizer step
(the learner), what the phase freed would stay counted against the node until the process needs it
again, while the node's other processes (engines, the learner, Ray's object store) peak in between.
"""

from __future__ import annotations

import ctypes


def return_freed_memory() -> None:
    """`malloc_trim(0)`: hand the freed heap pages back; a no-op where the C library is not glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass
