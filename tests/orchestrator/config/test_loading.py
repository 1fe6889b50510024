from pathlib import Path

import pytest

from orchestrator.config.base import ConfigError
from orchestrator.config.loading import load_config, parse_overrides
from orchestrator.config.train import TrainConfig


def test_overrides_parse_as_yaml_with_dotted_sections():
    assert parse_overrides(["a.b=1", "--c", "x y", "--d=[1, 2]", "e=null"]) == {"a": {"b": 1}, "c": "x y", "d": [1, 2], "e": None}


def test_yaml_plus_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("num_generations: 4\nrollout:\n  engines: 2\n")
    config = load_config(TrainConfig, path, ["rollout.max_inflight_samples=64", "--learning_rate", "1e-3"])
    assert (config.num_generations, config.rollout.engines, config.rollout.max_inflight_samples) == (4, 2, 64)
    assert config.learning_rate == 1e-3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["num_generation=4"], "unknown config key 'num_generation'; did you mean 'num_generations'"),
        (["rollout.engine=2"], "unknown config key 'rollout.engine'; did you mean 'rollout.engines'"),
        (["num_generations=1"], "config key 'num_generations': Input should be greater than or equal to 2"),
        (["temperature=hot"], "config key 'temperature': Input should be a valid number"),
        (["reward_weights=[1, 2]"], "reward_weights has 2 entries but reward_funcs has 1"),
        (["vllm_importance_sampling_mode=token"], "config key 'vllm_importance_sampling_mode': Input should be 'token_truncate'"),
        (["max_staleness=9"], "config key 'max_staleness': Input should be less than or equal to"),
        (["num_iterations=0"], "config key 'num_iterations': Input should be greater than or equal to 1"),
        (["reward_timeout_s=0"], "config key 'reward_timeout_s': Input should be greater than 0"),
        (
            ["prompts_per_step=2", "num_generations=2", "steps_per_generation=5"],
            "steps_per_generation \\(5\\) is more than the samples of a step \\(4\\)",
        ),
        (
            ["dynamic_sampling=true", "num_generations=4", "steps_per_generation=8"],
            "steps_per_generation \\(8\\) is more than the samples of a step that dynamic_sampling cut short \\(4",
        ),
        (
            ["learner.workers=2", "num_generations=8", "steps_per_generation=9"],
            "steps_per_generation \\(9\\) is more than the samples of a group \\(8\\), the least a learner worker",
        ),
        (
            ["vllm_importance_sampling_clip_min=3", "vllm_importance_sampling_clip_max=2"],
            "vllm_importance_sampling_clip_min \\(3.0\\) is not below vllm_importance_sampling_clip_max \\(2.0\\)",
        ),
        (["loss_type=vespo"], "loss_type vespo weighs sequences itself and takes per-token corrections only"),
        (
            ["vllm_importance_sampling_mode=token_truncate", "vllm_importance_sampling_clip_max=null"],
            "clips the ratio, but vllm_importance_sampling_clip_min and clip_max are both null",
        ),
    ],
)
def test_bad_keys_and_values_are_named(tmp_path, overrides, message):
    path = tmp_path / "run.yaml"
    path.write_text("{}\n")
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(TrainConfig, path, overrides)


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("max_steps: 3\nrollout: [\n")
    with pytest.raises(ConfigError, match=r"run.yaml:\d+: invalid YAML"):
        load_config(TrainConfig, path, [])


def test_relative_paths_in_a_config_file_are_read_from_its_folder(tmp_path, monkeypatch):
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train.jsonl").write_text('{"prompt": "hi"}\n')
    (folder / "my_reward.py").write_text("def score(prompts, completions, **kwargs):\n    return [0.0] * len(prompts)\n")
    (folder / "tools.py").write_text("def look(call_text, **context):\n    return call_text\n")
    (folder / "rm").mkdir()  # a reward model's folder
    (folder / "run.yaml").write_text(
        "model: Qwen/Qwen2-0.5B\n"  # a hub name: nothing by that name beside the file
        "prompts: data/train.jsonl\n"
        "eval_prompts: builtin:arithmetic_eval\n"
        "reward_funcs: [my_reward.py:score, builtin:search_call, orchestrator.builtin.search_task:search_call_reward, rm, org/other-rm]\n"
        "reward_processing_classes: [null, null, null, rm, org/tok]\n"
        "chat_template: '{{ messages }}'\n"
        "tools: [{name: look, fn: 'tools.py:look', begin: '<search>', end: '</search>'}]\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "cli_reward.py").write_text("def score(prompts, completions, **kwargs):\n    return [1.0] * len(prompts)\n")
    monkeypatch.chdir(elsewhere)
    config = load_config(TrainConfig, folder / "run.yaml", [])
    assert config.prompts == str(folder / "data" / "train.jsonl")
    assert config.reward_funcs == [
        f"{folder / 'my_reward.py'}:score",
        "builtin:search_call",
        "orchestrator.builtin.search_task:search_call_reward",
        str(folder / "rm"),
        "org/other-rm",  # a hub id: nothing by that name beside the file
    ]
    assert config.reward_processing_classes == [None, None, None, str(folder / "rm"), "org/tok"]
    assert config.tools[0].fn == f"{folder / 'tools.py'}:look"
    assert (config.model, config.eval_prompts, config.chat_template) == (
        "Qwen/Qwen2-0.5B",
        "builtin:arithmetic_eval",
        "{{ messages }}",
    )
    # on the command line, from the current folder
    overrides = ["reward_funcs=[cli_reward.py:score]", "reward_processing_classes=null"]
    overridden = load_config(TrainConfig, folder / "run.yaml", overrides)
    assert overridden.reward_funcs == ["cli_reward.py:score"]


def test_a_relative_config_path_still_gives_paths_that_hold_from_anywhere(tmp_path, monkeypatch):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "r.py").write_text("def score(prompts, completions, **kwargs):\n    return [0.0] * len(prompts)\n")
    (tmp_path / "configs" / "run.yaml").write_text("reward_funcs: [r.py:score]\n")
    monkeypatch.chdir(tmp_path)
    config = load_config(TrainConfig, Path("configs/run.yaml"), [])
    assert config.reward_funcs == [
        f"{tmp_path / 'configs' / 'r.py'}:score"
    ]  # absolute: the run folder's config.yaml resumes anywhere


def test_the_shipped_dapo_recipe_finds_its_reward_file_from_another_folder(tmp_path, monkeypatch):
    from orchestrator.contracts.user_functions import resolve

    recipe = Path(__file__).resolve().parents[3] / "configs" / "recipes" / "dapo.yaml"
    monkeypatch.chdir(tmp_path)
    config = load_config(TrainConfig, recipe, [])
    assert config.reward_funcs[1] == f"{recipe.parent / 'overlong.py'}:overlong"
    assert callable(resolve(config.reward_funcs[1], "reward_funcs", {}))  # TRL's soft overlong punishment
