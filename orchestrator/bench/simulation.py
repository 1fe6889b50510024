"""The driver at scale: the real pool, dispatcher, batch assembly and reward pipeline, fed by
hundreds of simulated engines (simulated_engines.py) on one machine.

    python -m orchestrator simulate --engines 256 --prompts 100000

Two numbers are compared. The achieved rate: groups and tokens per second through the real
`RolloutPool.generate`, real Ray calls and ObjectRefs, on the wall clock. The ideal rate: the same
groups on the same engines under the same timing model, replayed in virtual time with a driver
that costs nothing (`ideal_rate`); the engines are then the only limit, so the gap between the two
is what orchestration costs. The driver's CPU time per group is measured directly.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import os
import resource
import time

from orchestrator.bench.simulated_engine import SimulatedEngine, TokenTiming, completion_lengths
from orchestrator.contracts.groups import GroupRequest
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.machine import describe as describe_machine
from orchestrator.rollout.dispatcher import LeastLoadedDispatcher

PROGRESS_EVERY_S = 10.0


def workload(prompts: int, num_generations: int, max_tokens: int, seed: int = 0):
    """The built-in task's prompts, streamed and tokenised as `train` does, one group each, and each
    prompt's dataset columns (a `topic`, which the reward task receives as `train`'s would)."""
    import numpy as np
    from transformers import AutoTokenizer

    from orchestrator.builtin import search_task
    from orchestrator.builtin.tiny_model import tiny_model
    from orchestrator.data.stream import PromptStream
    from orchestrator.rollout.samples import Ragged
    from orchestrator.training.requests import PromptSet, build_requests, tokenize_prompts

    tokenizer = AutoTokenizer.from_pretrained(tiny_model().tokenizer_dir)
    texts = search_task.prompts(prompts, seed=seed)
    columns = [{"topic": search_task.topic_of(text)} for text in texts]
    sampling = SamplingConfig(max_tokens=max_tokens, temperature=1.0, seed=seed)
    items = PromptStream(texts, seed=seed).take(prompts)
    requests = build_requests(
        items, PromptSet(texts, Ragged.of(tokenize_prompts(texts, tokenizer), np.int32)), num_generations, sampling
    )
    return tokenizer, requests, columns


def ideal_rate(requests: list[GroupRequest], engines: int, capacity: int, timing: TokenTiming) -> dict:
    """The engine-bound rate: every group on `engines` simulated engines holding at most `capacity`
    samples each (the pool's rule), with a new group admitted the instant one finishes. A
    discrete-event replay in virtual time: no Ray, no wall clock."""
    schedules = [SimulatedEngine(timing) for _ in range(engines)]
    dispatcher = LeastLoadedDispatcher(list(range(engines)), capacity)
    pending = collections.deque(requests)
    running: dict[int, tuple[int, int]] = {}  # group key -> (engine, samples)
    events: list[tuple[float, int, int]] = []  # (time, engine version, engine)
    versions = [0] * engines
    keys = itertools.count()
    now = tokens = 0.0

    def finish(done: list[tuple[int, float]]) -> None:
        for key, _ in done:
            engine_id, samples = running.pop(key)
            dispatcher.finished(engine_id, samples)

    def fill() -> None:
        touched = set()
        while pending and (engine_id := dispatcher.pick(pending[0].num_generations)) is not None:
            request = pending.popleft()
            engine = schedules[engine_id]
            finish(engine.advance(now))
            key = next(keys)
            engine.admit(key, len(request.prompt_ids), _lengths(request, timing))
            running[key] = (engine_id, request.num_generations)
            dispatcher.started(engine_id, request.num_generations)
            touched.add(engine_id)
        for engine_id in touched:
            versions[engine_id] += 1
            at = schedules[engine_id].next_group_done()
            if at is not None:
                heapq.heappush(events, (at, versions[engine_id], engine_id))

    fill()
    while events:
        at, version, engine_id = heapq.heappop(events)
        if version != versions[engine_id]:
            continue
        now = at
        finish(schedules[engine_id].advance(now))
        versions[engine_id] += 1
        following = schedules[engine_id].next_group_done()
        if following is not None:
            heapq.heappush(events, (following, versions[engine_id], engine_id))
        fill()
    tokens = sum(engine.tokens for engine in schedules)
    return {"seconds": now, "groups_per_s": len(requests) / now, "tokens": int(tokens), "tokens_per_s": tokens / now}


def _lengths(request: GroupRequest, timing: TokenTiming) -> list[int]:
    sampling = request.sampling
    return completion_lengths(
        sampling.seed, request.group_id, request.num_generations, timing.mean_completion_tokens, sampling.max_tokens
    )


def run(
    engines: int, prompts: int, num_generations: int, max_tokens: int, capacity: int, timing: TokenTiming, hosts: int
) -> dict:
    from orchestrator.bench.simulated_engines import SimulatedLauncher
    from orchestrator.launch import connect, start_pool
    from orchestrator.rollout.samples import StepSamples

    result = {
        "machine": describe_machine(),
        "engines": engines,
        "prompts": prompts,
        "num_generations": num_generations,
        "max_tokens": max_tokens,
        "capacity_samples": capacity,
        "timing": timing.model_dump(),
        "hosts": hosts,
        "load_average_1min_at_start": os.getloadavg()[0],
    }
    print(
        f"simulate on {result['machine']} (load average {result['load_average_1min_at_start']:.1f}): {engines} engines "
        f"x {capacity} samples, {prompts} prompts x {num_generations} generations (max {max_tokens} tokens)",
        flush=True,
    )
    tokenizer, requests, columns = workload(prompts, num_generations, max_tokens)
    started = time.perf_counter()
    ideal = result["ideal"] = ideal_rate(requests, engines, capacity, timing)
    print(
        f"ideal (engine-bound, replayed in virtual time in {time.perf_counter() - started:.1f}s): "
        f"{ideal['groups_per_s']:.1f} groups/s, {ideal['tokens_per_s']:.0f} tokens/s, {ideal['seconds']:.1f}s",
        flush=True,
    )

    launcher = SimulatedLauncher(timing, hosts=hosts)
    config = RolloutConfig(engines=engines, max_inflight_samples=capacity, num_cpus_per_engine=0.0, startup_timeout_s=300)
    started = time.perf_counter()
    pool = start_pool(connect(num_cpus=0), "simulated", tokenizer, config, seed=0, launcher=launcher)
    try:
        result["start_s"] = time.perf_counter() - started
        print(
            f"{pool.size} simulated engines started in {result['start_s']:.1f}s (tokenizer fingerprints checked)",
            flush=True,
        )
        results, scoring, generate = _generate(pool, requests, columns, ideal)
        result["generate"] = generate
        result["host_lateness_ms"] = _percentiles([late * 1e3 for late in launcher.lateness()])
    finally:
        pool.shutdown()
        launcher.close()

    cpu, wall = time.process_time(), time.perf_counter()
    samples = StepSamples.assemble(requests, results)
    result["assembly"] = _costs(cpu, wall, len(requests))
    del results  # the samples hold what is needed; the peak below is the driver's with them alone
    return {**result, **_rewards_figures(samples, requests, scoring)}


def _rewards_figures(samples, requests: list[GroupRequest], scoring) -> dict:
    """The step's rewards merged and normalised, timed, and the checks of the step's samples."""
    cpu, wall = time.process_time(), time.perf_counter()
    rewards = _merge_and_normalise(samples, scoring)
    return {
        "rewards": {**_costs(cpu, wall, len(requests)), "mean": float(rewards.mean())},
        "samples": len(samples),
        "groups_exactly_once": _exactly_once(samples, requests),
        "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    }


def _generate(pool, requests: list[GroupRequest], columns: list[dict], ideal: dict):
    """`pool.generate` as the train loop calls it: groups are handed to reward tasks as they come
    back (`RewardScorer`, as in `GRPORun._generate`: the same reward arguments, dataset columns and
    error score), so that is part of the driver's per-group work; it is timed on its own as well."""
    from orchestrator.config.train import TrainConfig
    from orchestrator.rewards.scoring import RewardScorer

    batch_samples = TrainConfig.model_fields["reward_batch_samples"].default  # as a train run scores by default
    timeout_s = TrainConfig.model_fields["reward_timeout_s"].default
    scoring = RewardScorer(
        ["builtin:search_call"], None, error_score=0.0, columns=columns, batch_samples=batch_samples, timeout_s=timeout_s
    ).begin(requests)
    done, tokens, reward_cpu = 0, 0, 0.0
    others = _ray_processes_cpu()
    cpu, start = time.process_time(), time.perf_counter()
    last = start

    def on_result(result) -> None:
        nonlocal done, tokens, last, reward_cpu
        submitted = time.process_time()
        scoring.add(result)
        reward_cpu += time.process_time() - submitted
        done += 1
        tokens += sum(len(sample.completion_ids) for sample in result.samples)
        now = time.perf_counter()
        if now - last >= PROGRESS_EVERY_S:
            last = now
            print(
                f"[{now - start:5.0f}s] {done}/{len(requests)} groups, {done / (now - start):.1f} groups/s "
                f"(ideal {ideal['groups_per_s']:.1f}), {tokens / (now - start):.0f} tokens/s, driver CPU "
                f"{(time.process_time() - cpu) / done * 1e3:.3f} ms/group",
                flush=True,
            )

    results = pool.generate(requests, on_result=on_result)
    scoring.close()
    seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
    others = _ray_processes_cpu() - others
    generate = {
        "seconds": seconds,
        "groups": len(results),
        "tokens": tokens,
        "groups_per_s": len(results) / seconds,
        "tokens_per_s": tokens / seconds,
        "driver_cpu_s": cpu_s,
        "driver_cpu_ms_per_group": cpu_s / len(results) * 1e3,
        "reward_submit_cpu_ms_per_group": reward_cpu / len(results) * 1e3,
        "reward_tasks": scoring.tasks,
        "ray_processes_cpu_ms_per_group": others / len(results) * 1e3,
        "share_of_ideal": ideal["seconds"] / seconds,
        "load_average_1min_at_end": os.getloadavg()[0],
    }
    print(
        f"generated {len(results)} groups in {seconds:.1f}s: {generate['groups_per_s']:.1f} groups/s = "
        f"{generate['share_of_ideal'] * 100:.1f}% of ideal; driver CPU {generate['driver_cpu_ms_per_group']:.3f} ms/group",
        flush=True,
    )
    return results, scoring, generate


def _ray_processes_cpu() -> float:
    """CPU seconds used so far by this driver's child processes: the local Ray node (raylet, GCS)
    and its workers, the simulated engines' hosts among them. They share this machine's cores with
    the driver, so they are part of what the achieved rate had to pay for."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # gone meanwhile
            continue
        total += times.user + times.system
    return total


def _merge_and_normalise(samples, scoring):
    """What the train step does once generation is over: collect the groups' rewards in request
    order, normalise advantages within each group, and set both on the step's samples."""
    from orchestrator.training.advantages import group_advantages

    samples.set_scores(scoring.scores())
    samples.advantage = group_advantages(samples.reward, samples.group_id)
    return samples.reward


def _costs(cpu: float, wall: float, groups: int) -> dict:
    cpu_s, wall_s = time.process_time() - cpu, time.perf_counter() - wall
    return {"seconds": wall_s, "cpu_s": cpu_s, "ms_per_group": wall_s / groups * 1e3}


def _exactly_once(samples, requests: list[GroupRequest]) -> bool:
    counts = collections.Counter(zip(samples.group_id.tolist(), samples.sample_index.tolist()))
    wanted = {(r.group_id, s) for r in requests for s in range(r.num_generations)}
    return set(counts) == wanted and all(c == 1 for c in counts.values())


def _percentiles(values: list[float]) -> dict:
    if not values:
        return {"mean": 0.0, "p99": 0.0, "max": 0.0}
    ordered = sorted(values)
    return {"mean": sum(ordered) / len(ordered), "p99": ordered[int(0.99 * (len(ordered) - 1))], "max": ordered[-1]}


def table(r: dict) -> str:
    gen, ideal, timing = r["generate"], r["ideal"], r["timing"]
    orchestration = gen["driver_cpu_ms_per_group"] + r["assembly"]["ms_per_group"] + r["rewards"]["ms_per_group"]
    dispatch = gen["driver_cpu_ms_per_group"] - gen["reward_submit_cpu_ms_per_group"]
    rows = [
        ("engines x samples in flight each", f"{r['engines']} x {r['capacity_samples']}", f"{r['hosts']} host actor(s)"),
        (
            "work",
            f"{r['prompts']} prompts x {r['num_generations']}",
            f"{gen['tokens'] / r['samples']:.0f} tokens/sample mean, max {r['max_tokens']}",
        ),
        (
            "timing model",
            f"step {timing['step_base_s'] * 1e3:g} ms + {timing['step_per_sample_s'] * 1e3:g} ms/sample",
            f"prefill {timing['prefill_per_token_s'] * 1e3:g} ms/token",
        ),
        (
            "ideal (engine-bound)",
            f"{ideal['groups_per_s']:.1f} groups/s",
            f"{ideal['tokens_per_s']:.0f} tokens/s, {ideal['seconds']:.1f}s",
        ),
        (
            "achieved (real pool, real Ray)",
            f"{gen['groups_per_s']:.1f} groups/s",
            f"{gen['tokens_per_s']:.0f} tokens/s, {gen['seconds']:.1f}s",
        ),
        ("achieved / ideal", f"{gen['share_of_ideal'] * 100:.1f}%", "target >= 95%"),
        ("driver CPU: pool (dispatch, engine calls)", f"{dispatch:.3f} ms/group", "RolloutPool.generate, all threads"),
        (
            "driver CPU: handing groups to reward tasks",
            f"{gen['reward_submit_cpu_ms_per_group']:.3f} ms/group",
            f"{gen['reward_tasks']} tasks (reward columns + Ray calls)",
        ),
        (
            "other Ray processes' CPU (hosts, raylet)",
            f"{gen['ray_processes_cpu_ms_per_group']:.3f} ms/group",
            f"machine load {gen['load_average_1min_at_end']:.1f} at the end",
        ),
        (
            "batch assembly (step samples)",
            f"{r['assembly']['ms_per_group']:.3f} ms/group",
            f"{r['assembly']['seconds']:.1f}s for all",
        ),
        (
            "rewards collected + advantages",
            f"{r['rewards']['ms_per_group']:.3f} ms/group",
            f"{r['rewards']['seconds']:.1f}s for all",
        ),
        ("orchestration per request", f"{orchestration:.3f} ms", "target < 1 ms"),
        (
            "simulated engines' own lag",
            f"{r['host_lateness_ms']['mean']:.1f} ms mean",
            f"p99 {r['host_lateness_ms']['p99']:.1f} ms",
        ),
        ("every group exactly once", "yes" if r["groups_exactly_once"] else "NO", f"{r['samples']} samples"),
    ]
    width = max(len(a) for a, _, _ in rows)
    lines = [f"| {'what':<{width}} | figure | note |", f"|{'-' * (width + 2)}|---|---|"]
    lines += [f"| {a:<{width}} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)
