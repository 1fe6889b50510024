"""The reward models of a run: checked on the driver before anything starts, then served by an actor
group of their own (`reward_models:`), which reward tasks call.

    check(config, conversational)          # preflight: every model loadable as TRL loads it, its tokenizer fit
    servers = RewardModelServers.start(config, timeout_s)  # None when reward_funcs names no model
    functions.score(..., reward_models=servers.workers)  # in a reward task: the model's scores for its samples
    servers.shutdown()

The workers run on nodes labelled `role=reward` when the cluster has any (`ray start --labels
role=reward`), otherwise wherever Ray finds `reward_models.num_cpus`/`num_gpus` free: never in the
driver or the learner. A worker that dies is restarted by Ray (`reward_models.max_restarts`) and the
call it was serving runs again on it, so its batch is scored again rather than lost.
"""

from __future__ import annotations

from orchestrator.contracts.errors import UserError
from orchestrator.contracts.reward_models import is_model
from orchestrator.log import log
from orchestrator.placement.labels import REWARD_ROLE, ROLE_LABEL


def models(config) -> dict[str, str | None]:
    """Each reward model's `reward_funcs` entry -> its tokenizer (`reward_processing_classes`; None: its own)."""
    return {spec: tokenizer for _, spec, tokenizer in _entries(config) if is_model(spec)}


def _entries(config) -> list[tuple[str, str, str | None]]:
    """(config key, spec, tokenizer) of every reward function, the top-level ones and then the sources'
    own (those take the model's own tokenizer); a spec once, at its first place."""
    tokenizers = config.reward_processing_classes or [None] * len(config.reward_funcs)
    entries = [
        (f"reward_funcs[{i}]", spec, tokenizer) for i, (spec, tokenizer) in enumerate(zip(config.reward_funcs, tokenizers))
    ]
    for i, source in enumerate(config.prompt_sources):
        entries += [(f"prompts[{i}].reward_funcs[{j}]", spec, None) for j, spec in enumerate(source.reward_funcs or [])]
    return list({spec: (key, spec, tokenizer) for key, spec, tokenizer in reversed(entries)}.values())[::-1]


def check(config, conversational: bool, sample_tokens: int) -> None:
    """Refuse, naming the key, a reward model TRL's convention cannot score: one that cannot be found, one
    that is not a sequence classifier with one label (a causal LM would get an untrained score head), one
    whose positions cannot hold a sample of `sample_tokens` (the run's longest prompt and completion budget,
    in the policy's tokens: a longer sample would be cut or fail in the middle of a run), a tokenizer with
    neither pad nor EOS token, or one without a chat template in a conversational run."""
    from orchestrator.models import loaded_config, loaded_tokenizer

    for key, spec, tokenizer_name in _entries(config):
        if not is_model(spec):
            continue
        model_config = loaded_config(key, spec, "is neither a reward function ('file.py:name') nor a model")
        _check_classifier(key, spec, model_config)
        _check_context(key, spec, model_config, sample_tokens)
        tokenizer_key = key.replace("reward_funcs", "reward_processing_classes") if tokenizer_name else key
        tokenizer = loaded_tokenizer(tokenizer_key, tokenizer_name or spec)
        if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
            raise UserError(f"{tokenizer_key}: the reward model's tokenizer has neither a pad nor an EOS token to pad with")
        if conversational and not tokenizer.chat_template:
            raise UserError(
                f"{tokenizer_key}: the prompts are conversations, which a reward model reads through its tokenizer's "
                f"chat template, and {tokenizer_name or spec!r} has none (give one in reward_processing_classes)"
            )


def _check_classifier(key: str, spec: str, model_config) -> None:
    from orchestrator.models import check_architecture

    instead = (
        "not a sequence classifier: a reward model is loaded as AutoModelForSequenceClassification with one label "
        "(TRL's convention), and any other model would score with an untrained head"
    )
    check_architecture(key, spec, model_config, "ForSequenceClassification", instead)
    if model_config.num_labels != 1:
        raise UserError(f"{key}: {spec!r} has {model_config.num_labels} labels; a reward model has one (its logit is the reward)")


def _check_context(key: str, spec: str, model_config, sample_tokens: int) -> None:
    positions = getattr(model_config, "max_position_embeddings", None)
    if positions is not None and positions < sample_tokens:
        raise UserError(
            f"{key}: {spec!r} reads at most {positions} positions, and a sample of this run takes up to {sample_tokens} "
            "tokens (its longest prompt and max_completion_length, in the policy's tokens): a reward model with a "
            "longer context, or shorter prompts or max_completion_length"
        )


class RewardModelServers:
    def __init__(self, workers: list):
        self.workers = workers

    @classmethod
    def start(cls, config, timeout_s: float) -> RewardModelServers | None:
        """Start `reward_models.workers` actors holding every reward model of the run, and wait until each
        has loaded them (at most `timeout_s`); None when the run has no reward model."""
        import ray

        from workers.reward_models.actor import RewardModelWorker

        served = models(config)
        if not served:
            return None
        settings = config.reward_models
        options = {
            "num_cpus": settings.num_cpus,
            "num_gpus": settings.num_gpus,
            "max_restarts": settings.max_restarts,
            "max_task_retries": settings.max_restarts,
        }
        if _reward_nodes():
            options["label_selector"] = {ROLE_LABEL: REWARD_ROLE}
        actor = ray.remote(RewardModelWorker).options(**options)
        device = "cuda" if settings.num_gpus else "cpu"  # an actor that reserved no GPU still sees them all
        workers = [actor.remote(served, settings.max_batch_tokens, device) for _ in range(settings.workers)]
        group = cls(workers)
        try:
            nodes = ray.get([worker.node.remote() for worker in workers], timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            group.shutdown()
            raise UserError(
                f"reward_models: {settings.workers} worker(s) of {settings.num_cpus:g} CPU(s) and {settings.num_gpus:g} "
                f"GPU(s) did not start within {timeout_s:g}s: no node has them free (lower reward_models.num_cpus or "
                "num_gpus, or add nodes; labelled role=reward, if any node is)"
            ) from None
        except ray.exceptions.RayActorError as error:
            group.shutdown()
            raise UserError(f"reward_models: a worker could not load the reward models: {error}") from None
        log.info(f"reward models: {len(served)} served by {len(workers)} worker(s) on node(s) {sorted(set(nodes))}")
        return group

    def shutdown(self) -> None:
        import ray

        for worker in self.workers:
            ray.kill(worker, no_restart=True)


def _reward_nodes() -> bool:
    import ray

    return any((node.get("Labels") or {}).get(ROLE_LABEL) == REWARD_ROLE for node in ray.nodes() if node.get("Alive"))
