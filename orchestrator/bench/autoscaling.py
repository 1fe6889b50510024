"""`python -m orchestrator simulate --autoscale`: the autoscaling policy (orchestrator/rollout/autoscale.py)
on a load that changes mid-run, in virtual time, against a fixed pool of the starting size.

A step generates `samples` completions whose mean length doubles halfway through the run, then trains
for `learner_s`. Each engine generates `tokens_per_s` on its own (engines on their own nodes: one more
engine adds its throughput), and an engine asked for serves `engine_start_s` later (a node coming up,
vLLM starting). On-policy, the learner waits for the whole generation: the wait share the policy reads
is generation / step. The real `Autoscaler` decides after every step from these timings; nothing else
of the run is modelled, so this shows the policy's decisions and what they buy, not the pool's own
costs (`simulate` without --autoscale measures those).
"""

from __future__ import annotations

import dataclasses

from orchestrator.contracts.rollout import AutoscaleSettings
from orchestrator.rollout.autoscale import Autoscaler, StepTimings


@dataclasses.dataclass(frozen=True)
class Load:
    steps: int = 120
    samples: int = 256
    tokens: int = 200  # mean completion length in the first half; twice that in the second
    tokens_per_s: float = 2000.0  # one engine's generation throughput
    learner_s: float = 10.0  # one training step
    engine_start_s: float = 60.0


@dataclasses.dataclass(frozen=True)
class Step:
    engines: int  # serving
    generate_s: float
    step_s: float
    decision: str


def run(load: Load, settings: AutoscaleSettings | None, engines: int) -> list[Step]:
    """Every step of the run; `settings` None: a fixed pool of `engines`."""
    scaler = Autoscaler(settings, engines) if settings is not None else None
    clock, serving, starting, steps = 0.0, engines, [], []
    for index in range(load.steps):
        serving += sum(1 for ready in starting if ready <= clock)
        starting = [ready for ready in starting if ready > clock]
        tokens = load.tokens * (2 if index >= load.steps // 2 else 1)
        generate_s = load.samples * tokens / (serving * load.tokens_per_s)
        step_s = generate_s + load.learner_s
        clock += step_s
        decision = "fixed"
        if scaler is not None:
            made = scaler.decide(StepTimings(generate_s, step_s, load.samples * tokens, generate_s), serving, len(starting))
            wanted = made.target - serving - len(starting)
            starting += [clock + load.engine_start_s] * max(0, wanted)
            serving = min(serving, made.target)  # a shrink drains an engine by the next step
            decision = made.reason
        steps.append(Step(serving, generate_s, step_s, decision))
    return steps


def report(load: Load, settings: AutoscaleSettings, engines: int) -> str:
    """The two runs side by side, per half: mean learner wait share, step time, and engines at the end."""
    fixed, scaled = run(load, None, engines), run(load, settings, engines)
    half = load.steps // 2
    lines = [
        f"autoscaling simulation: {load.steps} steps of {load.samples} samples, completions of {load.tokens} tokens "
        f"then {2 * load.tokens} from step {half + 1}; {load.tokens_per_s:g} tokens/s per engine, learner "
        f"{load.learner_s:g}s/step, engines serve {load.engine_start_s:g}s after they are asked for",
        f"policy: {settings.model_dump()}",
        f"{'pool':<28}{'half':>6}{'wait share':>12}{'s/step':>9}{'engines at end':>16}",
    ]
    for name, steps in ((f"fixed ({engines} engine(s))", fixed), (f"autoscaled (from {engines})", scaled)):
        for label, part in (("1st", steps[:half]), ("2nd", steps[half:])):
            tail = part[len(part) // 2 :]  # the half's steady second half, past the policy's first moves
            wait = sum(s.generate_s for s in tail) / sum(s.step_s for s in tail)
            step_s = sum(s.step_s for s in tail) / len(tail)
            lines.append(f"{name:<28}{label:>6}{wait:>11.0%}{step_s:>9.1f}{part[-1].engines:>16}")
    return "\n".join(lines)
