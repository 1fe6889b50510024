"""Typed, validated configuration: one model per component, composed into the run config."""

from orchestrator.config.base import ConfigError, StrictModel
from orchestrator.config.rollout import RolloutConfig
from orchestrator.config.sampling import SamplingConfig

__all__ = ["ConfigError", "RolloutConfig", "SamplingConfig", "StrictModel"]
