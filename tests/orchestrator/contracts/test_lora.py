"""The `lora:` section: PEFT's names, off by default, and every setting the engines or the learner
cannot honour refused before anything starts, naming the key."""

import pytest

from orchestrator.config.loading import load_config
from orchestrator.config.train import TrainConfig
from workers.rollout.engine import max_lora_rank


def test_off_by_default_and_on_with_peft_names_from_the_command_line(tmp_path):
    assert TrainConfig().lora is None
    (tmp_path / "run.yaml").write_text("max_steps: 3\n")
    config = load_config(TrainConfig, tmp_path / "run.yaml", ["lora.r=8", "lora.target_modules=[q_proj,v_proj]"])
    assert config.lora.r == 8 and config.lora.target_modules == ["q_proj", "v_proj"]
    assert config.lora.lora_alpha == 32 and TrainConfig(lora={}).lora.target_modules == "all-linear"


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"lora": {"lora_dropout": 0.05}}, r"lora.lora_dropout 0.05: the learner trains with dropout off"),
        ({"lora": {"modules_to_save": ["lm_head"]}}, r"lora.modules_to_save \['lm_head'\]: vLLM 0.32 cannot serve"),
        ({"lora": {"target_modules": []}}, r"lora.target_modules is empty"),
        ({"lora": {}, "learner": {"fsdp": True, "workers": 2}}, r"lora with learner.fsdp is not supported"),
        ({"lora": {}, "added_tokens": ["<x>"]}, r"lora with added_tokens \['<x>'\]"),
        ({"lora": {"r": 32}, "rollout": {"max_lora_rank": 16}}, r"lora.r \(32\) is more than rollout.max_lora_rank \(16\)"),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_the_key(settings, expected):
    with pytest.raises(ValueError, match=expected):
        TrainConfig(**settings)


def test_the_engines_max_lora_rank_is_the_smallest_vllm_value_that_holds_r():
    config = TrainConfig(lora={"r": 12})
    assert max_lora_rank(config.rollout, 12) == 16
    assert max_lora_rank(config.rollout, 8) == 8
    assert max_lora_rank(TrainConfig(lora={"r": 12}, rollout={"max_lora_rank": 64}).rollout, 12) == 64
    with pytest.raises(ValueError, match="max_lora_rank"):
        TrainConfig(rollout={"max_lora_rank": 12})  # vLLM takes 1, 8, 16, 32, ...
