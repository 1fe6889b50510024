"""`bench --only progress-reports`: is it worth having engines report each sample's tokens every N tokens,
so that an engine that dies without notice (SIGKILL, a lost machine) loses at most N tokens per sample
instead of everything its samples had made?

What it would cost, measured: an engine must then see every sample's tokens as they come (vLLM's DELTA
outputs) instead of once at the end (FINAL_ONLY, what the engines ask for), and send what is new every N
tokens. One vLLM engine on the bench model generates the same groups both ways, in this process, timed
after an untimed warm-up; the DELTA side also copies each sample's new tokens into a report every N.

What it would save, computed at fleet scale with `simulate`'s timing (46 ms a token for each of 64 samples
in flight) and the preemption model's lengths (log-normal, mean 4000, cut at 16384): a sample in flight
when its engine dies has made, on average, E[L^2] / 2E[L] tokens (a random moment of a random token's
sample), all generated again without reports, and N / 2 with them; and the reports every engine sends the
driver (a Ray call, ids + log-probs + versions, 12 bytes a token) per second.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np

EVERY = (64, 256, 1024)  # tokens between two reports of a sample
BYTES_PER_TOKEN = 12  # token id, log-prob, version: 4 bytes each


def measure(model: Path, groups: int, n: int, max_tokens: int, repeats: int = 3) -> dict:
    """Engine tokens/s with FINAL_ONLY and with DELTA outputs read every token (reports every N), medians."""
    return asyncio.run(_measure(model, groups, n, max_tokens, repeats))


async def _measure(model: Path, groups: int, n: int, max_tokens: int, repeats: int) -> dict:
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    from orchestrator.contracts.rollout import RolloutConfig
    from orchestrator.rollout.kv_cache import cpu_kv_cache_bytes
    from workers.rollout.engine import engine_args

    samples = groups * n
    model_config = json.loads((model / "config.json").read_text())
    config = RolloutConfig(
        max_inflight_samples=samples, kv_cache_memory_bytes=cpu_kv_cache_bytes(model_config, samples, max_tokens + 16)
    )
    llm = AsyncLLM.from_engine_args(engine_args(str(model), model, config, "cpu", seed=0))
    try:
        kinds = {
            "final_only": RequestOutputKind.FINAL_ONLY,
            **{f"delta_every_{every}": RequestOutputKind.DELTA for every in EVERY},
        }
        await _round(llm, groups, n, max_tokens, RequestOutputKind.FINAL_ONLY, None)  # warm-up, untimed
        result = {}
        for name, kind in kinds.items():
            every = int(name.rsplit("_", 1)[1]) if kind == RequestOutputKind.DELTA else None
            runs = [await _round(llm, groups, n, max_tokens, kind, every) for _ in range(repeats)]
            rates = [tokens / seconds for tokens, seconds, _ in runs]
            result[name] = {"tokens_per_s": statistics.median(rates), "runs": rates, "reports": runs[0][2]}
    finally:
        llm.shutdown()
        del llm
        gc.collect()  # now, not at interpreter exit, when its __del__ finds the modules it needs gone
    return result


async def _round(llm, groups: int, n: int, max_tokens: int, kind, every: int | None) -> tuple[int, float, int]:
    """(tokens generated, seconds, reports made) for `groups` groups of `n` samples of `max_tokens`."""
    from orchestrator.contracts.sampling import SamplingConfig
    from workers.rollout.sampling import vllm_params

    params = vllm_params(SamplingConfig(max_tokens=max_tokens, ignore_eos=True, seed=1), n, group_id=0)
    params.output_kind = kind
    reports = [0]

    async def group(index: int) -> int:
        seen: dict[int, list[int]] = {}
        last = None
        async for output in llm.generate({"prompt_token_ids": [5, 6, 7, 8]}, params, f"r{time.monotonic_ns()}-{index}"):
            last = output
            if every is None:
                continue
            for completion in output.outputs:
                tokens = seen.setdefault(completion.index, [])
                tokens += completion.token_ids
                if len(tokens) % every < len(completion.token_ids):  # crossed a multiple of `every`: report
                    reports[0] += 1
                    list(tokens[-every:])  # the copy a report would carry
        return sum(len(c) for c in seen.values()) if every is not None else sum(len(c.token_ids) for c in last.outputs)

    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*(group(index) for index in range(groups))))
    return tokens, time.perf_counter() - start, reports[0]


def fleet_figures(engines: int = 1024, seed: int = 0) -> dict:
    """What reports would save and send at fleet scale, on the preemption model's lengths and timing."""
    from orchestrator.bench.preemption import Fleet

    fleet = Fleet(engines=engines)
    rng = random.Random(seed)
    lengths = np.array([fleet.length(rng) for _ in range(200_000)], dtype=np.float64)
    made = float((lengths**2).mean() / (2 * lengths.mean()))  # tokens a sample in flight has, on average
    tokens_per_s = engines * fleet.capacity / fleet.token_s
    per_death_s = made * fleet.token_s  # engine time lost per death: every slot's sample restarts
    return {
        "engines": engines,
        "made_per_sample": made,
        "lost_per_death_engine_s": per_death_s,
        "every": {
            every: {
                "lost_per_death_engine_s": every / 2 * fleet.token_s,
                "reports_per_s": tokens_per_s / every,
                "bytes_per_s": tokens_per_s * BYTES_PER_TOKEN,
            }
            for every in EVERY
        },
    }


def table(result: dict, fleet: dict) -> str:
    base = result["final_only"]["tokens_per_s"]
    lines = [
        "| engine outputs | tokens/s (median) | vs FINAL_ONLY | reports |",
        "|---|---|---|---|",
    ]
    for name, figures in result.items():
        rate = figures["tokens_per_s"]
        lines.append(f"| {name} | {rate:,.0f} | {rate / base - 1:+.1%} | {figures['reports']:,} |")
    lines += [
        "",
        f"At {fleet['engines']} engines: a sample in flight has made {fleet['made_per_sample']:,.0f} tokens on average; "
        f"a death without reports loses {fleet['lost_per_death_engine_s']:.0f} s of the engine's time.",
        "",
        "| report every | engine time lost per death (s) | reports to the driver per s | bytes to the driver per s |",
        "|---|---|---|---|",
    ]
    for every, figures in fleet["every"].items():
        lines.append(
            f"| {every} tokens | {figures['lost_per_death_engine_s']:.0f} | {figures['reports_per_s']:,.0f} | "
            f"{figures['bytes_per_s'] / 1e6:,.1f} MB |"
        )
    return "\n".join(lines)
