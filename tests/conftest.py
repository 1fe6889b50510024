"""Shared fixtures. Expensive things (the tiny model, Ray, vLLM engines) start once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny():
    from orchestrator.builtin.tiny_model import tiny_model

    return tiny_model()


@pytest.fixture(scope="session")
def learner_tokenizer(tiny):
    """The learner's tokenizer: base vocabulary + <search>, </search>; no pad token."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny.tokenizer_dir)


@pytest.fixture(scope="session")
def base_tokenizer(tiny):
    """The tokenizer the model folder carries: no <search>."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny.model_dir)


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray, started the way every command starts it (orchestrator/launch.py)."""
    import ray

    from orchestrator.launch import connect

    yield connect(num_cpus=4)
    ray.shutdown()


@pytest.fixture(scope="session")
def pool(tiny, learner_tokenizer, ray_session):
    """Two real vLLM engines serving the tiny model with the learner tokenizer."""
    from orchestrator.contracts.rollout import RolloutConfig
    from orchestrator.launch import start_pool

    started = start_pool(ray_session, str(tiny.model_dir), learner_tokenizer, RolloutConfig(engines=2))
    yield started
    started.shutdown()
