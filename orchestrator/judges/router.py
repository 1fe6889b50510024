"""`JudgeRouter`: one judge's front desk. Turns a reward function's prompts into groups for the judge's
engine pool, and the groups' samples back into answers.

    router = JudgeRouter("quality", pool, tokenizer, settings, context=256)   # pool: a started RolloutPool
    answers = router.generate(["Is 2+2=4? Answer yes or no:"], max_tokens=1, deadline=time.time() + 60)
    odds = router.choices(prompts, ["yes", "no"], deadline=...)     # [{"yes": logprob, "no": logprob}, ...]
    router.take_stats()                                              # calls, tokens, seconds since the last take

A prompt is a string, or a conversation (messages) rendered by the judge's chat template. Each prompt is
a group of one sample on the pool, so the pool's machinery serves judges as it serves rollouts:
least-loaded engines, `max_inflight_samples` per engine, health checks, and a dead engine's groups sent
to the others while it is replaced. Calls are served one at a time (a call's prompts all go out together:
a reward function sends its whole batch in one call); a call still waiting when its deadline passes is
not started. Plain class: `orchestrator/judges/pools.py` runs it in an actor.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter

from orchestrator.contracts.errors import RunError, UserError
from orchestrator.contracts.groups import GroupResult
from orchestrator.contracts.judges import JudgeCompletion, JudgeSettings
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rollout.groups import make_groups


class JudgeError(UserError):
    """A judge call that cannot be served as asked (a prompt too long for the judge's context, bad choices)."""


class JudgeTimeoutError(TimeoutError):
    """A judge call did not finish before its deadline (`judges.<name>.timeout_s`)."""


class JudgeLostError(RunError):
    """A judge's router is gone: every later call would fail too, so the run stops instead of scoring
    `reward_error_score` from then on."""


MAX_TOP_LOGPROBS = 20  # vLLM's default max_logprobs


class JudgeRouter:
    def __init__(self, name: str, pool, tokenizer, settings: JudgeSettings, context: int):
        """`pool`: anything with `generate(requests) -> results` (a RolloutPool); `context`: the judge
        engines' prompt + answer limit (their max_model_len)."""
        self.name, self.pool, self.tokenizer, self.settings, self.context = name, pool, tokenizer, settings, context
        self._group_ids = itertools.count()
        self._serving = threading.Lock()  # held for a whole call
        self._counting = threading.Lock()  # held only to count: the figures never wait for a call
        self._stats = Counter()

    def generate(
        self,
        prompts: list,
        deadline: float,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        allowed_token_ids: list[int] | None = None,
    ) -> list[JudgeCompletion]:
        """One answer per prompt, in order. `deadline`: wall-clock time (time.time()) past which the call
        is not started; `temperature` 0 answers greedily."""
        if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
            raise JudgeError(f"judge {self.name!r}: top_logprobs={top_logprobs}; a judge returns 0 to {MAX_TOP_LOGPROBS}")
        sampling = SamplingConfig(
            max_tokens=max_tokens or self.settings.max_tokens,
            temperature=temperature,
            top_logprobs=top_logprobs,
            allowed_token_ids=allowed_token_ids,
            skip_special_tokens=True,
        )
        return [self._completion(sample, tokens) for sample, tokens in self._serve(prompts, sampling, deadline)]

    def choices(self, prompts: list, choices: list[str], deadline: float) -> list[dict[str, float]]:
        """For each prompt, the log-probability of each choice as the judge's continuation, among the
        choices only: the judge's distribution at the first token where the choices differ (after the
        tokens they share, appended to the prompt), renormalised over those tokens; sum(exp) == 1."""
        shared, first = self._branch_tokens(choices)
        sampling = SamplingConfig(max_tokens=1, temperature=1.0, top_logprobs=len(choices), allowed_token_ids=first)
        answers = self._serve(prompts, sampling, deadline, suffix=shared)
        return [{choice: sample.top_logprobs[0][token] for token, choice in zip(first, choices)} for sample, _ in answers]

    def _branch_tokens(self, choices: list[str]) -> tuple[list[int], list[int]]:
        """The tokens all choices start with, and each choice's next token (all different, or an error)."""
        ids = [self.tokenizer(choice, add_special_tokens=False)["input_ids"] for choice in choices]
        if not 2 <= len(choices) <= MAX_TOP_LOGPROBS:
            raise JudgeError(f"judge {self.name!r}: choices takes 2 to {MAX_TOP_LOGPROBS} choices, got {len(choices)}")
        shared = 0
        while all(len(tokens) > shared for tokens in ids) and len({tokens[shared] for tokens in ids}) == 1:
            shared += 1
        first = [tokens[shared] if len(tokens) > shared else None for tokens in ids]
        if None in first or len(set(first)) < len(first):
            raise JudgeError(
                f"judge {self.name!r}: choices {choices} cannot be told apart by one token after what they share "
                "(one is the start of another, or they differ only later); reword them"
            )
        return ids[0][:shared], first

    def _serve(self, prompts: list, sampling: SamplingConfig, deadline: float, suffix: list[int] = ()) -> list[tuple]:
        """(sample, prompt tokens) per prompt, in order: each prompt (with `suffix` after it) a group of
        one on the pool."""
        ids = [
            self._prompt_ids(index, prompt, sampling.max_tokens + len(suffix)) + list(suffix)
            for index, prompt in enumerate(prompts)
        ]
        requests = make_groups([""] * len(ids), ids, 1, sampling, group_ids=[next(self._group_ids) for _ in ids])
        with self._serving:
            if time.time() > deadline:
                raise JudgeTimeoutError(f"judge {self.name!r}: the call waited past its deadline for earlier calls")
            began = time.perf_counter()
            results = self.pool.generate(requests)
            self._count(ids, results, time.perf_counter() - began)
        by_group = {result.group_id: result.samples[0] for result in results}
        failed = [sample.error for sample in by_group.values() if sample.error is not None]
        if failed:  # a prompt that kept killing the judge's engines (orchestrator/rollout/poison.py)
            raise JudgeError(f"judge {self.name!r}: {failed[0]}")
        return [(by_group[request.group_id], len(request.prompt_ids)) for request in requests]

    def close(self, timeout_s: float) -> None:
        """Wait (at most `timeout_s`) for the call under way, and take no more: the pool can then be
        stopped without a call's thread inside it."""
        self._serving.acquire(timeout=timeout_s)

    def take_stats(self) -> dict[str, float]:
        """What was served since the last take: calls, prompts, prompt and completion tokens, seconds busy."""
        with self._counting:
            stats, self._stats = self._stats, Counter()
        return {key: stats[key] for key in ("calls", "prompts", "prompt_tokens", "completion_tokens", "seconds")}

    def _prompt_ids(self, index: int, prompt, max_tokens: int) -> list[int]:
        if isinstance(prompt, str):
            ids = self.tokenizer(prompt)["input_ids"]
        elif isinstance(prompt, list) and all(isinstance(message, dict) for message in prompt):
            if not self.tokenizer.chat_template:
                raise JudgeError(
                    f"judge {self.name!r}: prompt {index} is a conversation and the judge's tokenizer has no chat template"
                )
            text = self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            raise JudgeError(
                f"judge {self.name!r}: prompt {index} is a {type(prompt).__name__}; expected a string or a list of messages"
            )
        if len(ids) + max_tokens > self.context:
            raise JudgeError(
                f"judge {self.name!r}: prompt {index} has {len(ids)} tokens; with {max_tokens} answer tokens that exceeds "
                f"the judge's context of {self.context} (raise judges.{self.name}.pool.max_model_len, or shorten the prompt)"
            )
        return ids

    def _count(self, ids: list[list[int]], results: list[GroupResult], seconds: float) -> None:
        with self._counting:
            self._add(ids, results, seconds)

    def _add(self, ids: list[list[int]], results: list[GroupResult], seconds: float) -> None:
        self._stats["calls"] += 1
        self._stats["prompts"] += len(ids)
        self._stats["prompt_tokens"] += sum(map(len, ids))
        self._stats["completion_tokens"] += sum(len(result.samples[0].completion_ids) for result in results)
        self._stats["seconds"] += seconds

    def _completion(self, sample, prompt_tokens: int) -> JudgeCompletion:
        top = [
            {self.tokenizer.decode([token]): value for token, value in position.items()} for position in sample.top_logprobs or []
        ]
        return JudgeCompletion(
            text=sample.completion,
            token_ids=list(sample.completion_ids),
            logprobs=[float(value) for value in sample.logprobs],
            top_logprobs=top,
            prompt_tokens=prompt_tokens,
        )
