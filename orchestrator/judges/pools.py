"""The run's judges (`judges:`): checked on the driver before anything starts, then one router actor per
judge, which starts and drives the judge's own engine pool.

    contexts = check(config, longest_prompt)       # preflight: each judge loadable, its context big enough
    judges = JudgePools.start(config, cluster, contexts)   # None when the run names no judge
    judges.clients()                               # {name: Judge}: what reward functions get as `judges`
    judges.metrics()                               # judges/<name>/... since the last call
    judges.shutdown()

A judge's engines are rollout engines (workers/rollout/) started by the same `EngineFleet` as the policy's,
with the judge's model loaded from disk and never a weight sync: the same placement (nodes labelled
`role=rollout`), tokenizer fingerprint check, health checks and dead-engine replacement
(`judges.<name>.pool.max_restarts`). The router (router.py) is the pool's driver, in an actor of its own
(no CPU reserved) so that reward tasks on any node can reach it. Its engines are owned by it: if it
dies Ray ends them, and each engine's reaper ends its vLLM processes (workers/rollout/reaper.py). The
judge's engines are Ray actors named `judge-<name>-engine-<id>` (`ray list actors` shows them).
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.contracts.errors import UserError
from orchestrator.contracts.judges import JudgeSettings
from orchestrator.contracts.special_tokens import special_strings
from orchestrator.judges.client import Judge
from orchestrator.log import log

ROUTER_CONCURRENCY = 16  # calls a router takes at once (it serves them one at a time; the rest wait for the lock)
CONTROL = "control"  # the router's concurrency group for figures and shutdown: never queued behind calls
START_MARGIN_S = 120.0  # beyond the engines' own start deadline: the router loads the tokenizer first
SHUTDOWN_S = 120.0  # an engine fleet's shutdown gives each engine 30 s, then waits for its clean-ups
CALL_WAIT_S = 10.0  # a shutdown waits this long for the judge call under way before it stops the engines


def check(config, longest_prompt: int) -> dict[str, int]:
    """Refuse, naming the key, a judge that cannot serve: a model that cannot be found or is not a causal
    LM, a tokenizer that does not load, or a context too small for the run's longest prompt and completion
    plus the judge's answer. Returns each judge's context (its engines' max_model_len)."""
    return {name: _check_one(name, judge, longest_prompt + config.max_completion_length) for name, judge in config.judges.items()}


def _check_one(name: str, judge: JudgeSettings, sample_tokens: int) -> int:
    from orchestrator.models import check_architecture, context_limit, loaded_config, loaded_tokenizer, resolve_model

    key = f"judges.{name}"
    model, tokenizer = resolve_model(judge.model, judge.tokenizer, keys=(f"{key}.model", f"{key}.tokenizer"))
    model_config = loaded_config(f"{key}.model", model)
    instead = "not a causal LM: a judge generates its answers (a sequence classifier belongs in reward_funcs)"
    check_architecture(f"{key}.model", model, model_config, "ForCausalLM", instead)
    loaded_tokenizer(f"{key}.tokenizer", tokenizer)
    context = context_limit(model, judge.pool.max_model_len) or getattr(model_config, "max_position_embeddings", None)
    if context is None:
        raise UserError(f"{key}.pool.max_model_len: the judge's context is not known from {model!r}; set it")
    needed = sample_tokens + judge.max_tokens
    if context < needed:
        raise UserError(
            f"{key}.pool.max_model_len: the judge's context of {context} tokens cannot hold a question about the run's "
            f"longest prompt and completion ({sample_tokens} tokens) with its answer ({key}.max_tokens={judge.max_tokens}): "
            f"at least {needed} needed (a judge with a longer context, or shorter prompts or max_completion_length)"
        )
    return context


def judge_cpus(config) -> float:
    """Ray CPUs the judges' engines reserve."""
    return sum(judge.pool.reserved_cpus() for judge in config.judges.values())


class JudgeServer:
    """The router's actor: starts the judge's pool in `start`, then serves calls (router.py)."""

    def __init__(self, name: str, settings: JudgeSettings, cluster, seed: int, context: int):
        self.name, self.settings, self.cluster, self.seed, self.context = name, settings, cluster, seed, context
        self.router = None
        self.engines = None  # kept from the moment it exists: a shutdown mid-start stops what started

    def start(self) -> int:
        """Start the engines and admit them all (or fail); returns how many serve, and the judge tokenizer's
        control-token strings (for `Judge.untrusted`)."""
        from transformers import AutoTokenizer

        from orchestrator.judges.router import JudgeRouter
        from orchestrator.models import resolve_model
        from orchestrator.rollout.fleet import EngineFleet
        from orchestrator.rollout.pool import RolloutPool

        model, tokenizer_name = resolve_model(self.settings.model, self.settings.tokenizer)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
        pool_config = self.settings.pool.model_copy(update={"max_model_len": self.context})
        if pool_config.cpu_threads_bind is None:  # the policy's engines take this machine's core slots
            pool_config = pool_config.model_copy(update={"cpu_threads_bind": "auto"})
        model_config = json.loads((Path(model) / "config.json").read_text()) if Path(model).is_dir() else {}
        self.engines = EngineFleet(self.cluster, model, tokenizer, pool_config, seed=self.seed, name=f"judge-{self.name}")
        self.engines.size_for(model_config, pool_config.max_inflight_samples, self.context)
        pool = RolloutPool(self.engines).start()
        self.router = JudgeRouter(self.name, pool, tokenizer, self.settings, self.context)
        return pool.size, special_strings(tokenizer)

    def generate(self, *args):
        return self.router.generate(*args)

    def choices(self, *args):
        return self.router.choices(*args)

    def stats(self) -> dict:
        pool = self.router.pool
        return {**self.router.take_stats(), "engines": pool.size, "engine_restarts": pool.restarts}

    def shutdown(self) -> None:
        if self.router is not None:
            self.router.close(timeout_s=CALL_WAIT_S)
        if self.engines is not None:
            self.engines.shutdown()


class JudgePools:
    def __init__(self, servers: dict[str, object], settings: dict[str, JudgeSettings]):
        self.servers, self.settings = servers, settings
        self.specials: dict[str, list[str]] = {}  # each judge tokenizer's control-token strings

    @classmethod
    def start(cls, config, cluster, contexts: dict[str, int]) -> JudgePools | None:
        """Start every judge's router and pool (each engine within its `pool.startup_timeout_s`), or fail
        having stopped those started; None when the run names no judge."""
        import ray

        if not config.judges:
            return None
        timeout_s = max(judge.pool.startup_timeout_s for judge in config.judges.values()) + START_MARGIN_S
        server = ray.remote(num_cpus=0, max_concurrency=ROUTER_CONCURRENCY, concurrency_groups={CONTROL: 2})(JudgeServer)
        servers = {
            name: server.remote(name, judge, cluster, config.seed, contexts[name]) for name, judge in config.judges.items()
        }
        judges = cls(servers, dict(config.judges))
        try:
            started = dict(zip(servers, ray.get([actor.start.remote() for actor in servers.values()], timeout=timeout_s)))
        except BaseException as error:
            judges.shutdown()
            if isinstance(error, ray.exceptions.GetTimeoutError):
                raise UserError(
                    f"judges: their engines did not start within {timeout_s:g}s (see the engine log lines above)"
                ) from None
            if isinstance(error, ray.exceptions.RayTaskError):
                raise error.cause from None
            raise
        judges.specials = {name: specials for name, (_, specials) in started.items()}
        log.info("judges: " + ", ".join(f"{name} ({engines} engine(s))" for name, (engines, _) in started.items()))
        return judges

    def clients(self) -> dict[str, Judge]:
        return {
            name: Judge(name, server, self.settings[name].timeout_s, self.specials.get(name, []))
            for name, server in self.servers.items()
        }

    def metrics(self) -> dict[str, float]:
        """Each judge's figures since the last call: judges/<name>/calls, prompts, prompt_tokens,
        completion_tokens, latency_s (mean per call), engines, engine_restarts."""
        import ray

        names = list(self.servers)
        figures = {}
        asked = [self.servers[name].stats.options(concurrency_group=CONTROL).remote() for name in names]
        for name, stats in zip(names, ray.get(asked, timeout=60)):
            calls = stats.get("calls", 0)
            stats["latency_s"] = stats.pop("seconds", 0.0) / calls if calls else 0.0
            figures.update({f"judges/{name}/{key}": value for key, value in stats.items()})
        return figures

    def shutdown(self) -> None:
        import ray

        closing = [server.shutdown.options(concurrency_group=CONTROL).remote() for server in self.servers.values()]
        ray.wait(closing, num_returns=len(closing), timeout=SHUTDOWN_S)
        for server in self.servers.values():
            ray.kill(server)
