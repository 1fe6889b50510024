"""The release check every fence runs on import: the private code a fence uses was read from one
release series of its library, and another series is refused before any of it is called."""

from __future__ import annotations

import re


def check_series(library: str, installed: str, series: str, below: str, recheck: str) -> None:
    """Raise unless `installed` (a local build suffix `+...` ignored) is a `series`.x release of
    `library`, naming the fence, the pin (`>=series,<below`) and what to `recheck` before moving it."""
    if not re.fullmatch(re.escape(series) + r"\.\d+", installed.partition("+")[0]):
        raise RuntimeError(
            f"{library} {installed} is installed, but workers/fences/{library}.py uses private code of {library} "
            f"{series}.x (pyproject.toml pins {library}>={series},<{below}): install {library} {series}.x "
            f"(deploy/constraints/), or re-check {recheck} and move the pin"
        )
