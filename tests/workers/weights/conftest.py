import pytest


@pytest.fixture(scope="module")
def learner(tiny, ray_session):
    """A real learner actor on the tiny model, one per test module (its weights change as the module trains it)."""
    import ray

    from orchestrator.config.train import TrainConfig
    from workers.learner.actor import Learner

    config = TrainConfig(num_generations=2, prompts_per_step=1, max_steps=1)
    actor = ray.remote(Learner).options(num_cpus=0).remote(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    ray.get(actor.start.remote())
    yield actor
    ray.kill(actor)
