import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.__main__ import main
from orchestrator.commands.config import REFERENCE_FILES
from orchestrator.config.loading import load_config
from orchestrator.config.reference import REGENERATE, TRL_OTHER_NAME, TRL_SAME_NAME, defaults_yaml
from orchestrator.config.train import TrainConfig
from orchestrator.contracts.lora import LoraSettings

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "reference"


@pytest.mark.parametrize("name", sorted(REFERENCE_FILES))
def test_committed_references_match_the_code(name):
    path = REFERENCE / name
    assert path.is_file(), f"{path} is missing: run `{REGENERATE}`"
    assert path.read_text(encoding="utf-8") == REFERENCE_FILES[name](), f"{path} is stale: run `{REGENERATE}`"


def _schema_keys() -> list[str]:
    """Every key of every config section, read from pydantic's JSON schema (not from the generator's walk)."""
    schema = TrainConfig.model_json_schema()
    models = [schema, *schema.get("$defs", {}).values()]
    return [name for model in models for name in model.get("properties", {})]


def test_every_key_of_every_section_is_in_the_reference():
    markdown = (REFERENCE / "config.md").read_text(encoding="utf-8")
    yaml_text = (REFERENCE / "defaults.yaml").read_text(encoding="utf-8")
    for key in _schema_keys():
        assert re.search(rf"^\| `([\w.\[\]<>]+\.)?{key}` \|", markdown, re.MULTILINE), f"{key} is not in config.md"
        assert re.search(rf"^[# ]*(- )?{key}:", yaml_text, re.MULTILINE), f"{key} is not in defaults.yaml"


def test_defaults_yaml_loads_back_into_the_default_config():
    assert not [name for name, field in TrainConfig.model_fields.items() if field.is_required()]
    loaded = load_config(TrainConfig, REFERENCE / "defaults.yaml", [])
    assert loaded.model_dump() == TrainConfig().model_dump()
    assert loaded == TrainConfig()


def test_the_commented_lora_keys_uncommented_give_the_default_adapter(tmp_path):
    lines = defaults_yaml().splitlines()
    start = lines.index("# lora:")
    block = [line.removeprefix("# ") for line in itertools.takewhile(lambda line: line.startswith("#"), lines[start:])]
    path = tmp_path / "lora.yaml"
    path.write_text("\n".join(block) + "\n")
    assert load_config(TrainConfig, path, []).lora == LoraSettings()


def test_tool_keys_without_a_default_are_marked_required():
    text = defaults_yaml()
    for key in ("name", "fn", "begin", "end"):
        assert re.search(rf"^#  +(- )?{key}:  # required$", text, re.MULTILINE), key


def test_trl_names_are_fields_of_trl_and_peft_configs():
    import peft
    import trl

    trl_fields = set(trl.GRPOConfig.__dataclass_fields__)
    assert TRL_SAME_NAME == set(TrainConfig.model_fields) & trl_fields
    assert set(TRL_OTHER_NAME.values()) <= trl_fields
    assert set(LoraSettings.model_fields) <= set(peft.LoraConfig.__dataclass_fields__)


def test_config_command_prints_the_references(capsys):
    for argv, name in ((["config"], "config.md"), (["config", "--defaults"], "defaults.yaml"), (["config", "--cli"], "cli.md")):
        assert main(argv) == 0
        assert capsys.readouterr().out == REFERENCE_FILES[name](), argv


def test_config_command_writes_the_three_files(tmp_path):
    assert main(["config", "--write", str(tmp_path)]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(REFERENCE_FILES)


def test_train_help_points_to_the_config_reference(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # as one line, however argparse wrapped it
    assert "python -m orchestrator config" in out
    assert "docs/reference/config.md" in out


def test_config_answers_without_ray_vllm_or_torch():
    code = (
        "import sys, contextlib, io\n"
        "from orchestrator.__main__ import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['config'])\n"
        "heavy = [m for m in ('ray', 'vllm', 'torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
