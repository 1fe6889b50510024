"""`Judge`: what a reward function holds to ask a judge (`judges["quality"]` among its keyword arguments).

    async def judged(prompts, completions, judges, **kwargs):
        judge = judges["quality"]
        questions = [
            f"Is the answer between the tags correct? Answer yes or no.\\nQuestion: {p}\\n<answer>{judge.untrusted(c)}</answer>\\nVerdict:"
            for p, c in zip(prompts, completions)
        ]
        odds = await judge.choices(questions, [" yes", " no"])
        return [o[" yes"] for o in odds]                       # the log-probability of " yes"

    answers = await judges["quality"].generate(questions, max_tokens=32)   # JudgeCompletion per prompt

A client is small and picklable: it holds the judge router's actor handle (orchestrator/judges/pools.py),
so a reward task on any node can use it. Every call has a deadline (`judges.<name>.timeout_s`); one past
it raises `JudgeTimeoutError`, which the reward machinery treats as any raising function. A router that
died raises `JudgeLostError`, which stops the run. A reward function that is not `async` can call
`Judge.wait(...)` on the coroutine instead of awaiting it.
"""

from __future__ import annotations

import asyncio
import time

from orchestrator.contracts.judges import JudgeCompletion
from orchestrator.contracts.special_tokens import neutralise
from orchestrator.judges.router import JudgeLostError, JudgeTimeoutError


class Judge:
    def __init__(self, name: str, router, timeout_s: float, specials: list[str] = ()):
        """`specials`: the judge tokenizer's control-token strings (orchestrator/contracts/special_tokens.py)."""
        self.name, self._router, self.timeout_s, self._specials = name, router, timeout_s, list(specials)

    def untrusted(self, text: str) -> str:
        """`text` (the policy's) with the judge's control-token strings made plain, so a completion cannot
        end the judge's turn or write its own instructions; put it between clear delimiters, after yours."""
        return neutralise(text, self._specials)

    async def generate(
        self,
        prompts: list,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        allowed_token_ids: list[int] | None = None,
    ) -> list[JudgeCompletion]:
        """The judge's answer to each prompt (a string, or messages for its chat template), greedy unless
        `temperature` says otherwise."""
        deadline = time.time() + self.timeout_s
        ref = self._router.generate.remote(prompts, deadline, max_tokens, temperature, top_logprobs, allowed_token_ids)
        return await self._within_deadline(ref, len(prompts))

    async def choices(self, prompts: list, choices: list[str]) -> list[dict[str, float]]:
        """Per prompt, each choice's log-probability as the judge's next token, among the choices only."""
        ref = self._router.choices.remote(prompts, choices, time.time() + self.timeout_s)
        return await self._within_deadline(ref, len(prompts))

    @staticmethod
    def wait(coroutine):
        """Run a call from a reward function that is not `async` (an `async def` one awaits it instead)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coroutine)
        coroutine.close()
        raise RuntimeError("Judge.wait was called inside a running event loop: `await` the judge's call there instead")

    async def _within_deadline(self, ref, prompts: int):
        import ray

        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), self.timeout_s)
        except TimeoutError:
            raise JudgeTimeoutError(
                f"judge {self.name!r} did not answer {prompts} prompt(s) within judges.{self.name}.timeout_s={self.timeout_s:g}s"
            ) from None
        except ray.exceptions.RayTaskError as error:  # the router refused the call: its own error, not Ray's
            raise error.cause from None
        except ray.exceptions.RayActorError as error:
            raise JudgeLostError(
                f"judge {self.name!r}: its router died ({type(error).__name__}); the run cannot ask it again"
            ) from None
