"""`python -m orchestrator export CHECKPOINT --out FOLDER`: a LoRA run's checkpoint as one merged model.

A LoRA checkpoint is PEFT's adapter folder (plus the tokenizer and the learner's state); it names
its base model. This loads the base model, puts the adapter in (`PeftModel.from_pretrained`),
merges it into the weights (`merge_and_unload`) and saves a plain transformers model folder with
the run's tokenizer, which transformers and vLLM load without PEFT. The folder is written under
a `.partial` name and renamed when complete.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from orchestrator.contracts.errors import UserError


def run_export(args: argparse.Namespace) -> int:
    from orchestrator.models import model_folder_problem

    checkpoint, out = Path(args.checkpoint), Path(args.out)
    if not (checkpoint / "adapter_config.json").is_file():
        raise UserError(
            f"{checkpoint} is not a LoRA checkpoint (no adapter_config.json); a full-model run's checkpoint is already "
            "a model folder that transformers and vLLM load"
        )
    problem = model_folder_problem(checkpoint)
    if problem:
        raise UserError(f"{checkpoint}: {problem}")
    if out.exists():
        raise UserError(f"--out {out} exists; give a new folder")
    from workers.learner.lora import base_of

    base = args.base_model or base_of(str(checkpoint))
    where = "--base-model" if args.base_model else f"{checkpoint}/adapter_config.json"
    try:
        merge(base, checkpoint, out)
    except OSError as error:  # no such folder, and no such model on the hub (or no network)
        raise UserError(f"cannot load the base model {base} (from {where}): {error}; pass --base-model") from None
    print(f"merged {checkpoint} into {base}: {out}")
    return 0


def merge(base: str, checkpoint: Path, out: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(checkpoint)).merge_and_unload()
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    merged.save_pretrained(partial, safe_serialization=True)
    AutoTokenizer.from_pretrained(str(checkpoint)).save_pretrained(partial)
    partial.rename(out)
