"""`RolloutPool`: N rollout actors, each one vLLM engine, that all hold the canonical tokenizer.

Start-up ships the canonical tokenizer to every engine and refuses to go on unless each engine
reports the same fingerprint. `generate` sends groups to the least-loaded engine and returns
results as they finish; callers get them back in any order and assemble by group id.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from orchestrator.config.rollout import RolloutConfig
from orchestrator.errors import UserError
from orchestrator.rollout.dispatcher import LeastLoadedDispatcher
from orchestrator.rollout.groups import GroupRequest, GroupResult
from orchestrator.tokenizer.bundle import TokenizerBundle, bundle_tokenizer
from orchestrator.tokenizer.fingerprint import differences, fingerprint


class TokenizerMismatchError(UserError):
    """An engine loaded a tokenizer that is not the canonical one."""


class EngineFailedError(RuntimeError):
    """An engine failed to start or died while generating."""


class RolloutPool:
    def __init__(
        self,
        model: str,
        tokenizer,
        config: RolloutConfig,
        seed: int = 0,
        engine_tokenizer: TokenizerBundle | None = None,
    ):
        """`tokenizer` is the canonical tokenizer object. `engine_tokenizer` overrides what is
        shipped to the engines (default: the canonical one), which is how a mismatch is shown."""
        self.model = model
        self.config = config
        self.seed = seed
        self.expected = fingerprint(tokenizer)
        self.bundle = engine_tokenizer or bundle_tokenizer(tokenizer)
        self.actors: dict[int, object] = {}
        self.device = "cpu"

    def start(self) -> RolloutPool:
        import ray

        from orchestrator.ray_runtime import cluster_has_gpus, init_ray
        from workers.rollout.actor import RolloutWorker

        init_ray(num_cpus=self.config.engines * self.config.num_cpus_per_engine)
        self.device = "cuda" if cluster_has_gpus() else "cpu"
        gpus = self.config.tensor_parallel_size if self.device == "cuda" else 0
        actor_class = ray.remote(RolloutWorker)
        bundle_ref = ray.put(self.bundle)
        for engine_id in range(self.config.engines):
            self.actors[engine_id] = actor_class.options(
                num_cpus=self.config.num_cpus_per_engine, num_gpus=gpus, max_concurrency=10_000
            ).remote(engine_id, self.model, bundle_ref, self.config, self.device, self.seed + engine_id)
        try:
            self._check_tokenizers()
        except BaseException:
            self.shutdown()
            raise
        return self

    def _check_tokenizers(self) -> None:
        import ray

        refs = {engine_id: actor.start.remote() for engine_id, actor in self.actors.items()}
        problems = []
        for engine_id, ref in refs.items():
            try:
                reported = ray.get(ref, timeout=self.config.startup_timeout_s)
            except ray.exceptions.GetTimeoutError:
                raise EngineFailedError(
                    f"engine {engine_id} did not start within rollout.startup_timeout_s={self.config.startup_timeout_s}s"
                ) from None
            except ray.exceptions.RayError as error:
                raise EngineFailedError(f"engine {engine_id} failed to start: {error}") from None
            problems += [f"engine {engine_id}: {line}" for line in differences(self.expected, reported)]
        if problems:
            raise TokenizerMismatchError(
                "rollout engines loaded a tokenizer that differs from the canonical one; refusing to generate:\n  "
                + "\n  ".join(problems)
            )

    def generate(
        self, requests: list[GroupRequest], on_result: Callable[[GroupResult], None] | None = None
    ) -> list[GroupResult]:
        """Generate every group; results in completion order (assemble them by group id)."""
        import ray

        dispatcher = LeastLoadedDispatcher(list(self.actors), self.config.max_inflight_samples)
        pending = collections.deque(requests)
        inflight: dict[object, tuple[int, GroupRequest]] = {}
        results = []
        while pending or inflight:
            while pending and (engine_id := dispatcher.pick(pending[0].num_generations)) is not None:
                request = pending.popleft()
                inflight[self.actors[engine_id].generate.remote(request)] = (engine_id, request)
                dispatcher.started(engine_id, request.num_generations)
            done, _ = ray.wait(list(inflight), num_returns=1)
            for ref in done:
                engine_id, request = inflight.pop(ref)
                dispatcher.finished(engine_id, request.num_generations)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayActorError as error:
                    raise EngineFailedError(f"engine {engine_id} died while generating group {request.group_id}: {error}") from None
                results.append(result)
                if on_result is not None:
                    on_result(result)
        return results

    def engine_pids(self) -> dict[int, int]:
        import ray

        return {engine_id: ray.get(actor.pid.remote()) for engine_id, actor in self.actors.items()}

    def shutdown(self) -> None:
        import ray

        for actor in self.actors.values():
            try:
                ray.get(actor.shutdown.remote(), timeout=30)
            except ray.exceptions.RayError:
                pass
            ray.kill(actor)
        self.actors.clear()

    def __enter__(self) -> RolloutPool:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()
