"""Every shipped config loads as a valid TrainConfig (they are not run here; they must not rot)."""

from pathlib import Path

import pytest

from orchestrator.config.loading import load_config
from orchestrator.config.train import TrainConfig

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted(ROOT.glob("configs/**/*.yaml")) + [ROOT / "orchestrator/builtin/default_train.yaml"]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_config_is_valid(path):
    config = load_config(TrainConfig, path, [])
    assert config.max_steps >= 1


def test_the_rayjob_entrypoint_config_exists():
    rayjob = (ROOT / "deploy" / "rayjob.yaml").read_text()
    # The image holds the project in /app (deploy/Dockerfile's WORKDIR); the entrypoint names its config there.
    referenced = [
        word.removeprefix("/app/") for word in rayjob.split() if word.startswith("/app/configs/") and word.endswith(".yaml")
    ]
    assert referenced and all((ROOT / ref).is_file() for ref in referenced)


def test_the_configs_index_lists_every_example_config():
    index = (ROOT / "configs" / "README.md").read_text()
    listed = {path for path in CONFIGS if path.is_relative_to(ROOT / "configs")}
    missing = [
        str(path.relative_to(ROOT / "configs")) for path in listed if f"`{path.relative_to(ROOT / 'configs')}`" not in index
    ]
    assert not missing, f"configs/README.md does not list {missing}"
