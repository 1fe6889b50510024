"""`simulate` at small scale: the real pool and real Ray against simulated engines."""

import collections
import subprocess
import sys

from orchestrator.bench.simulated_engine import TokenTiming
from orchestrator.contracts.rollout import RolloutConfig

FAST = TokenTiming(step_base_s=0.002, step_per_sample_s=0.0, prefill_per_token_s=0.0, mean_completion_tokens=8)


def test_every_group_comes_back_once_with_the_rate_beside_the_ideal(tiny, ray_session):
    from orchestrator.bench import simulation

    result = simulation.run(engines=8, prompts=96, num_generations=4, max_tokens=32, capacity=16, timing=FAST, hosts=2)
    assert result["groups_exactly_once"] and result["samples"] == 96 * 4
    assert result["generate"]["groups"] == 96 and result["generate"]["groups_per_s"] > 0
    assert result["ideal"]["groups_per_s"] > 0 and result["generate"]["tokens"] == result["ideal"]["tokens"]
    table = simulation.table(result)
    assert "achieved / ideal" in table and "orchestration per request" in table


def test_the_ideal_replay_matches_the_timing_model_by_hand(tiny):
    from orchestrator.bench import simulation
    from orchestrator.bench.simulated_engine import completion_lengths

    _, requests, _ = simulation.workload(prompts=10, num_generations=2, max_tokens=16)
    timing = TokenTiming(step_base_s=0.01, step_per_sample_s=0.0, prefill_per_token_s=0.001, mean_completion_tokens=6)
    ideal = simulation.ideal_rate(requests, engines=1, capacity=2, timing=timing)  # one group at a time
    by_hand = sum(
        len(r.prompt_ids) * 0.001 + max(completion_lengths(r.sampling.seed, r.group_id, 2, 6, 16)) * 0.01 for r in requests
    )
    assert abs(ideal["seconds"] - by_hand) < 1e-9


def test_a_killed_engine_loses_no_group_and_is_replaced(tiny, ray_session):
    from orchestrator.bench import simulation
    from orchestrator.bench.simulated_engines import SimulatedLauncher
    from orchestrator.rollout.fleet import EngineFleet
    from orchestrator.rollout.pool import RolloutPool

    tokenizer, requests, _ = simulation.workload(prompts=80, num_generations=2, max_tokens=32)
    launcher = SimulatedLauncher(FAST)
    config = RolloutConfig(engines=4, max_inflight_samples=4, num_cpus_per_engine=0)
    pool = RolloutPool(EngineFleet(ray_session, "simulated", tokenizer, config, launcher=launcher))
    killed = []

    def kill_engine_0_once(result):
        if not killed:
            killed.append(0)
            launcher.kill(pool.engines.actors[0])

    try:
        pool.start()
        results = pool.generate(requests, on_result=kill_engine_0_once)
        counts = collections.Counter(r.group_id for r in results)
        assert sorted(counts) == list(range(80)) and set(counts.values()) == {1}
        assert pool.engines.restarts == 1 and 0 not in pool.engines.actors
    finally:
        pool.shutdown()
        launcher.close()


def test_bad_arguments_fail_before_ray_starts():
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "simulate", "--engines", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "--engines must be at least 1" in proc.stderr and "Traceback" not in proc.stderr
