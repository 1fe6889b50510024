"""Tools that misbehave, for the runner tests and the tool-failure training run."""

import asyncio
import time

from orchestrator.builtin.lookup_task import lookup


def echo(call_text: str, **context) -> str:
    return f"{call_text.strip()}@{context['sample_index']}"


async def async_echo(call_text: str, **context) -> str:
    await asyncio.sleep(0)
    return call_text.strip().upper()


def raises(call_text: str, **context) -> str:
    raise ValueError(f"no index for {call_text.strip()!r}")


def sleeps(call_text: str, **context) -> str:
    time.sleep(30)
    return "too late"


def returns_number(call_text: str, **context):
    return 42


def flaky_lookup(call_text: str, **context) -> str:
    """The lookup tool, except that it raises for 'apple' and hangs for 'river'."""
    topic = call_text.strip()
    if topic == "apple":
        raise ValueError("index offline for apple")
    if topic == "river":
        time.sleep(30)
    return lookup(call_text)
