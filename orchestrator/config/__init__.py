"""The run config of `train` (train.py) and how it is read (loading.py: YAML + overrides).

The sections the actors read (sampling, rollout, tools, the learner's GRPO settings) live in
`orchestrator/contracts/`, which the actors import too."""
