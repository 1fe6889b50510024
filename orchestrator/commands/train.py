"""`python -m orchestrator train [--config FILE.yaml] [key=value ...]`: a GRPO run.

The config, the output folder (or, with --resume, the checkpoint), the prompts, the reward
functions, the model and tokenizer, the stop token ids and prompt lengths are all checked before
Ray starts (training/preflight.py, training/run_dir.py); then the learner and the rollout pool
start and the step loop runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.log import log

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "builtin" / "default_train.yaml"


def run_train(args: argparse.Namespace) -> int:
    from orchestrator import hub_pins
    from orchestrator.training.preflight import preflight

    config, run_dir, checkpoint, resume = _load(args)
    # On resume the canonical tokenizer is the one the checkpoint saved (weights, optimizer and tokenizer as saved).
    checked = preflight(config, tokenizer_from=str(checkpoint) if args.resume else None, resumed=run_dir if args.resume else None)
    model = checked.model
    if args.resume:
        if config.lora is None:  # a LoRA checkpoint holds the adapter: the base model stays the run's
            model = str(checkpoint)
        run_dir.forget_after(resume.step)
        log.info(f"resuming {run_dir.root} from {checkpoint.name} (step {resume.step})")
    else:
        run_dir.prepare({**config.model_dump(mode="json"), "model": checked.model, "tokenizer": checked.tokenizer})
        hub_pins.record(checked.pins, run_dir.root)
        log.info(f"run folder: {run_dir.root}")
    if checked.dropped_prompts:
        log.warning(f"dropped {checked.dropped_prompts} prompt(s) longer than max_prompt_length={config.max_prompt_length}")

    from orchestrator.launch import start_training
    from orchestrator.training.loop import GRPORun

    config = hub_pins.pinned(config, checked.pins)  # the learner loads the commits, not a branch that may move
    if checked.chat_template is not None:  # the learner may be on another node: send the text, not the path
        config = config.model_copy(update={"chat_template": checked.chat_template})
    components = start_training(
        config,
        model,
        checked.canonical,
        resume_from=str(checkpoint) if resume else None,
        policy_version=resume.policy_version if resume else 0,
        max_prompt_tokens=checked.longest_prompt,
    )
    try:
        metrics = GRPORun(config, checked.data, run_dir, components, resume).run()
    finally:
        components.shutdown()
    first, last = metrics[0], metrics[-1]
    log.info(
        f"done: {len(metrics)} steps, reward {first['reward_mean']:.3f} (step 1) -> {last['reward_mean']:.3f} "
        f"(step {last['step']}); metrics, rollouts, plots and checkpoints in {run_dir.root}"
    )
    return 0


def _load(args: argparse.Namespace):
    """(config, run folder, checkpoint, resume state): a new run's config and the folder it will
    create, or a stopped run's config (with any overrides), folder and latest checkpoint."""
    from orchestrator.config.loading import load_config
    from orchestrator.config.train import TrainConfig
    from orchestrator.training.run_dir import RunDir

    if args.resume:
        run_dir = RunDir.existing(args.resume)
        config = load_config(TrainConfig, run_dir.root / "config.yaml", args.overrides)
        checkpoint, resume = run_dir.latest_checkpoint()
        _check_resumable(checkpoint, resume, config)
        return config, run_dir, checkpoint, resume
    config = load_config(TrainConfig, Path(args.config) if args.config else DEFAULT_CONFIG, args.overrides)
    return config, RunDir.create(config.output_dir), None, None  # the folder is created after preflight


def _check_resumable(checkpoint: Path, resume, config) -> None:
    """The run's config must train what the checkpoint holds: the same learner.fsdp, and a LoRA
    adapter with the same lora: settings, or a full model without them."""
    from orchestrator.contracts.errors import UserError

    if resume.learner_fsdp != config.learner.fsdp:
        written = str(resume.learner_fsdp).lower()
        raise UserError(f"{checkpoint} was written with learner.fsdp={written}: resume with learner.fsdp={written}")
    if (checkpoint / "adapter_config.json").is_file() != (config.lora is not None):
        what = "a LoRA adapter" if config.lora is None else "a full model, not a LoRA adapter"
        raise UserError(f"{checkpoint} holds {what}: resume with the lora: section the run was started with")
    if config.lora is not None:
        from workers.learner.lora import changed_settings

        changed = changed_settings(str(checkpoint), config.lora)
        if changed:
            raise UserError(
                f"{checkpoint}'s adapter was trained with other lora: settings ({'; '.join(changed)}): resume with the "
                "checkpoint's"
            )
