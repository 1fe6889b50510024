"""`RewardModelWorker`: the Ray actor that serves a run's reward models. A thin shell over
classifier.py; `orchestrator/rewards/models.py` starts the group and places it."""

from __future__ import annotations

from workers.reward_models.classifier import SequenceClassifier


class RewardModelWorker:
    """Created through `ray.remote(RewardModelWorker)`; every method is called remotely."""

    def __init__(self, models: dict[str, str | None], max_batch_tokens: int, device: str):
        """`models`: each reward model's `reward_funcs` entry -> its tokenizer (None: the model's own);
        `device`: "cuda" when the worker reserved a GPU, else "cpu"."""
        self._models = {spec: SequenceClassifier(spec, tokenizer, max_batch_tokens, device) for spec, tokenizer in models.items()}

    def node(self) -> str:
        """The node this worker runs on (once its models are loaded)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def score(self, spec: str, prompts: list, completions: list) -> list[float]:
        return self._models[spec].score(prompts, completions)
