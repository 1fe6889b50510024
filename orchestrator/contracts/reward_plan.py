"""Which reward functions score which rows, when prompt sources bring reward functions of their own.

    prompts:
      - {source: math.jsonl, ratio: 0.75, reward_funcs: [rewards.py:exact]}
      - {source: reasoning_gym:leg_counting, ratio: 0.25}     # no reward_funcs: the top-level ones score it
    reward_funcs: [builtin:reasoning_gym]

A source with its own `reward_funcs` is scored by those alone; every other row (a source without its
own, and the held-out eval_prompts) by the top-level `reward_funcs`. The run's functions are the
top-level ones and then each source's not already listed, each with one weight and one
`rewards/<name>` column, NaN on the rows it does not score (TRL's "not applicable"), so the weighted
sum leaves it out there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from orchestrator.contracts.reward_models import reward_name


@dataclasses.dataclass(frozen=True)
class RewardPlan:
    specs: tuple[str, ...]  # every reward function of the run, in order
    weights: tuple[float, ...]  # one per spec
    top: tuple[str, ...]  # the top-level reward_funcs
    own: Mapping[str, tuple[str, ...]]  # source name -> its own reward_funcs (sources that have them)

    @staticmethod
    def of(top: Sequence[str], top_weights: Sequence[float] | None, sources: Sequence[tuple]) -> RewardPlan:
        """The plan of the top-level functions and weights, and `sources`: (name, reward_funcs or None,
        reward_weights or None) each; a source without weights gives a function listed before its weight
        there, and a new one 1. A function given two different weights, and two functions of one name,
        raise ValueError naming them."""
        weights = dict(zip(top, top_weights or [1.0] * len(top)))
        where = dict.fromkeys(top, "reward_funcs")
        own = {}
        for name, specs, source_weights in sources:
            if specs is None:
                continue
            own[name] = tuple(specs)
            for spec, weight in zip(specs, source_weights or [weights.get(spec, 1.0) for spec in specs]):
                if weights.setdefault(spec, weight) != weight:
                    raise ValueError(
                        f"prompts: source {name!r} weighs {spec!r} {weight:g} and {where[spec]} {weights[spec]:g}: a "
                        "reward function has one weight in a run (give it the same weight, or a copy under another name)"
                    )
                where.setdefault(spec, f"source {name!r}")
        names = [reward_name(spec) for spec in weights]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"reward_funcs names {twice[0]!r} twice (a reward model is named by the last part of its path or id, "
                f"as in TRL): each entry's scores are recorded as rewards/<name>, so each needs a name of its own"
            )
        return RewardPlan(tuple(weights), tuple(weights.values()), tuple(top), own)

    def specs_for(self, source: str | None) -> tuple[str, ...]:
        """The functions that score a row of `source` (None: a row of no source, such as an eval prompt)."""
        return self.own.get(source, self.top)

    def rows_of(self, row_sources: Sequence[str | None]) -> dict[str, list[int]] | None:
        """Each function's rows among rows of these sources; None when every function scores every row."""
        if not self.own:
            return None
        rows = {spec: [] for spec in self.specs}
        for index, source in enumerate(row_sources):
            for spec in self.specs_for(source):
                rows[spec].append(index)
        return rows
