"""The machine a figure was measured on, in one line, printed beside every figure (`report`, `bench`,
`simulate`).

Floating-point results and speed depend on the CPU: oneDNN and BLAS pick kernels by the vector
instructions present (AVX2, AVX-512, AMX), and those kernels sum in different orders. A run is
deterministic on one machine, not across CPUs, so a figure names its CPU model and those
instructions."""

from __future__ import annotations

import os
import platform
from pathlib import Path

# The instructions that pick different kernels in torch (oneDNN), vLLM's CPU backend and BLAS.
VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")


def describe(cpuinfo: str | None = None) -> str:
    """e.g. 'AMD EPYC (family 25 model 17; avx2 avx512f avx512_bf16; no amx_tile), x86_64, 2 cores, Python 3.11.7'."""
    return f"{cpu(cpuinfo)}, {platform.machine()}, {cores()} cores, Python {platform.python_version()}"


def cpu(cpuinfo: str | None = None) -> str:
    """The CPU's model and which of VECTOR_FLAGS it has, from /proc/cpuinfo (Linux); the platform's
    processor name elsewhere."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.is_file() else ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block says it for all
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    if "model name" not in fields:
        return platform.processor() or "unknown CPU"
    flags = set(fields.get("flags", "").split())
    have = [flag for flag in VECTOR_FLAGS if flag in flags]
    lacks = [flag for flag in VECTOR_FLAGS if flag not in flags]
    family = f"family {fields['cpu family']} model {fields['model']}; " if "cpu family" in fields else ""
    return f"{fields['model name']} ({family}{' '.join(have) or 'no vector flags'}" + (
        f"; no {' '.join(lacks)})" if lacks else ")"
    )


def cores() -> int:
    """Cores this process may run on (its affinity), which is what its threads get."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0
