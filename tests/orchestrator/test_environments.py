"""TRL's tool calling, checked before Ray starts (orchestrator/environments.py and the config keys): every
refusal names what to fix, and prompts render their environment's tools."""

from __future__ import annotations

import json
import textwrap

import pytest
from pydantic import ValidationError

from orchestrator.config.loading import load_config
from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError
from orchestrator.training.preflight import preflight

GAME = textwrap.dedent(
    '''
    class Game:
        def reset(self, **columns) -> str:
            return " Go."

        def move(self, square: int) -> str:
            """Play a square.

            Args:
                square: Which square.
            """
            return "ok"

        def get_reward(self) -> float:
            return 1.0


    class NoReset:
        def move(self, square: int) -> str:
            """Play a square.

            Args:
                square: Which square.
            """
            return "ok"


    class NoReward:
        def reset(self, **columns):
            return None


    class NeedsBoard:
        def reset(self, board, **columns):
            return None

        def get_reward(self) -> float:
            return 0.0


    def reward(completions, **kwargs):
        return [0.0] * len(completions)


    def reads_environments(completions, environments, **kwargs):
        return [e.score for e in environments]
    '''
)


@pytest.fixture()
def files(tmp_path):
    game = tmp_path / "game.py"
    game.write_text(GAME)
    prompts = tmp_path / "prompts.jsonl"
    rows = [{"prompt": [{"role": "user", "content": "Play."}], "environment": name} for name in ("game", "other")]
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    text = tmp_path / "text.jsonl"
    text.write_text(json.dumps({"prompt": "Play."}) + "\n")
    return game, prompts, text


def config(prompts, **keys) -> TrainConfig:
    return TrainConfig(model="builtin:tool-chat", prompts=str(prompts), max_completion_length=16, num_generations=2, **keys)


def test_prompts_render_their_own_environments_tools_after_checks(files):
    game, prompts, _ = files
    checked = preflight(config(prompts, environment_factory={"game": f"{game}:Game", "other": f"{game}:NoReward"}))
    use = checked.data.environment
    assert checked.data.environment_names == ["game", "other"]
    assert [s["function"]["name"] for s in use.schemas["game"]] == ["move"] and use.schemas["other"] == []
    assert '"name": "move"' in checked.data.prompts[0] and '"name": "move"' not in checked.data.prompts[1]
    assert use.environments["game"].owns_reward and not use.environments["other"].owns_reward
    assert use.chat_template is None  # Qwen2.5's template is prefix-preserving (TRL keeps it)


def test_a_source_names_the_environment_its_rows_run_in(files, tmp_path):
    game, _, text = files
    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps({"prompt": [{"role": "user", "content": "Play."}], "environment": "other"}) + "\n")
    sources = [{"source": str(chat), "environment": "game"}, {"source": str(chat), "name": "rest"}]
    factory = {"game": f"{game}:Game", "other": f"{game}:NoReward"}
    fields = config(chat, environment_factory=factory).model_dump(exclude_unset=True)
    checked = preflight(TrainConfig.model_validate({**fields, "prompts": sources}))
    assert checked.data.environment_names == ["game", "other"]  # the source's setting wins over the row's column
    assert '"name": "move"' in checked.data.prompts[0] and '"name": "move"' not in checked.data.prompts[1]
    twin = tmp_path / "twin.py"
    twin.write_text(GAME)
    with pytest.raises(UserError, match=r"environment_factory.other: .* are two classes named Game, .* rename one"):
        preflight(
            TrainConfig.model_validate(
                {**fields, "prompts": sources, "environment_factory": {"game": f"{game}:Game", "other": f"{twin}:Game"}}
            )
        )
    with pytest.raises(ValidationError, match=r"prompts\[0\].environment: 'gme' is not an entry of environment_factory"):
        TrainConfig(prompts=[{"source": str(chat), "environment": "gme"}], environment_factory=factory)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"environment_factory": "{game}:NoReset"}, "has no reset method"),
        ({"environment_factory": "{game}:NoReward"}, "No reward source provided"),
        ({"environment_factory": "{game}:reward"}, "is not a class"),
        ({"environment_factory": "{game}:NeedsBoard"}, r"NeedsBoard.reset cannot be called with this dataset's row"),
        ({"environment_factory": {"game": "{game}:Game"}}, "'other', which is not among the environments"),
        ({"tools": ["{game}:reward"], "reward_funcs": ["{game}:reward"]}, "cannot describe"),
        (
            {"environment_factory": "{game}:Game", "reward_funcs": ["{game}:reads_environments"]},
            r"reward_funcs\[0\]: .* takes `environments`",
        ),
    ],
)
def test_refusals_name_the_key_and_what_to_fix(files, keys, message):
    game, prompts, _ = files
    keys = json.loads(json.dumps(keys).replace("{game}", str(game)))
    with pytest.raises(UserError, match=message):
        preflight(config(prompts, **keys))


def test_plain_prompts_and_a_template_without_tool_calls_are_refused(files):
    game, prompts, text = files
    with pytest.raises(UserError, match="must be conversations"):
        preflight(config(text, environment_factory=f"{game}:Game"))
    with pytest.raises(UserError, match="cannot render a tool-calling conversation"):
        preflight(config(prompts, environment_factory=f"{game}:Game").model_copy(update={"model": "builtin:chat"}))


def test_the_config_keys(files, tmp_path):
    game, prompts, _ = files
    assert config(prompts, environment_factory=f"{game}:Game").reward_funcs == []  # the environment's own reward
    with pytest.raises(ValidationError, match="mixes TRL's form"):
        config(prompts, tools=[f"{game}:reward", {"name": "t", "fn": f"{game}:reward", "begin": "<a>", "end": "</a>"}])
    with pytest.raises(ValidationError, match="with text-tag tools"):
        config(prompts, environment_factory=f"{game}:Game", tools=[{"name": "t", "fn": "x.py:f", "begin": "<a>", "end": "</a>"}])
    file = tmp_path / "run.yaml"
    file.write_text("tools: [game.py:reward]\nenvironment_factory: {a: game.py:Game}\nreward_funcs: [game.py:reward]\n")
    loaded = load_config(TrainConfig, file, [])
    assert loaded.tools == [f"{game}:reward"] and loaded.environment_factory == {"a": f"{game}:Game"}


def test_without_prompts_the_environments_reset_writes_each_prompt_as_in_trl(files):
    from orchestrator.builtin.lookup_environment import CODES, LookupEnvironment

    game, _, _ = files
    assert TrainConfig(environment_factory=f"{game}:Game").prompts == "builtin:reset"  # TRL's train_dataset=None
    checked = preflight(TrainConfig(model="builtin:tool-chat", environment_factory="builtin:lookup", max_completion_length=64))
    assert checked.data.conversations == [[{"role": "user", "content": ""}]]  # TRL's placeholder, reset appends to it
    environment = LookupEnvironment()
    question = environment.reset(prompt=[{"role": "user", "content": ""}])
    assert environment.topic in CODES and environment.topic in question  # no topic column: reset drew one and asks it
    assert environment.reset(topic="apple") is None and environment.topic == "apple"  # a dataset's row: as before
    with pytest.raises(UserError, match=r"environment_factory names several environments .* needs an 'environment' column"):
        preflight(config("builtin:reset", environment_factory={"a": f"{game}:Game", "b": f"{game}:Game"}))
