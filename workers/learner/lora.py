"""The learner's side of a LoRA run (`lora:`, orchestrator/contracts/lora.py), all through PEFT.

TRL's `GRPOTrainer` wraps the model itself when given a `peft_config` (`peft_config`), trains only
the adapter, and for `beta > 0` takes the reference log-probs with the adapter disabled (TRL's
`use_adapter(model, None)`): no second copy of the weights. What leaves the learner:

- to the engines, the base weights under their Hugging Face names (`base_weights`, once per new
  engine) and the adapter under PEFT's names (`adapter_weights`, every step), workers/weights/adapters.py;
- to a checkpoint, PEFT's own adapter folder (`adapter_config.json`, `adapter_model.safetensors`),
  which `PeftModel.from_pretrained` and vLLM's LoRA loader read. It names the base model (`base_of`,
  for `export`); a resume loads the run's model and then the adapter (`load_adapter`), once the
  run's `lora:` settings are found to be the checkpoint's (`changed_settings`).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from orchestrator.contracts.errors import UserError
from orchestrator.contracts.lora import LoraSettings
from workers.weights.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS


def peft_config(settings: LoraSettings):
    from peft import LoraConfig

    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=settings.target_modules,
        task_type="CAUSAL_LM",
    )


def base_of(folder: str) -> str:
    """The base model an adapter folder (a LoRA run's checkpoint) was trained on."""
    return json.loads((Path(folder) / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]


def load_adapter(model, folder: str) -> None:
    """Put the adapter saved in `folder` into the PEFT `model` (a resume: exactly the weights saved)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    result = set_peft_model_state_dict(model, load_file(str(Path(folder) / ADAPTER_WEIGHTS)))
    missing = [key for key in result.missing_keys if ".lora_" in key]
    if result.unexpected_keys or missing:
        raise UserError(
            f"{folder}: the adapter does not fit this model's (weights with no place: {result.unexpected_keys[:3]}, "
            f"places with no weights: {missing[:3]})"
        )


def changed_settings(folder: str, settings: LoraSettings) -> list[str]:
    """The `lora:` settings of a run that differ from those its checkpoint `folder` was trained with
    (r, lora_alpha, target_modules), as "key: checkpoint's -> run's"; empty if none."""
    saved = json.loads((Path(folder) / ADAPTER_CONFIG).read_text())
    changed = [
        f"{key}: {saved[key]} -> {getattr(settings, key)}" for key in ("r", "lora_alpha") if saved[key] != getattr(settings, key)
    ]
    # PEFT writes the names it was given, or for 'all-linear' the full name of every module it chose
    names = saved["target_modules"] if isinstance(saved["target_modules"], list) else [saved["target_modules"]]
    chose = any("." in name for name in names)
    if isinstance(settings.target_modules, list) and (chose or set(names) != set(settings.target_modules)):
        changed.append(f"target_modules: {sorted(names) if not chose else 'all-linear'} -> {settings.target_modules}")
    elif settings.target_modules == "all-linear" and not chose:
        changed.append(f"target_modules: {sorted(names)} -> all-linear")
    return changed


def save_adapter(model, folder: str) -> None:
    """PEFT's adapter folder; the base model it names is made absolute when it is a folder, so that
    `export` finds it from anywhere."""
    config = model.peft_config["default"]
    if config.base_model_name_or_path and Path(config.base_model_name_or_path).is_dir():
        config.base_model_name_or_path = str(Path(config.base_model_name_or_path).resolve())
    model.save_pretrained(folder, safe_serialization=True, save_embedding_layers=False)


def adapter_config(model) -> dict:
    """PEFT's adapter_config.json of `model`'s adapter, as PEFT writes it (sets as lists, and so on)."""
    with tempfile.TemporaryDirectory(prefix="adapter-config-") as scratch:
        model.peft_config["default"].save_pretrained(scratch)
        return json.loads((Path(scratch) / ADAPTER_CONFIG).read_text())


def base_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """The base model's weights under their Hugging Face names (PEFT's `.base_layer` taken out)."""
    for name, tensor in model.get_base_model().state_dict().items():
        if ".lora_" not in name:
            yield name.replace(".base_layer.", "."), tensor


def adapter_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """The adapter's weights under PEFT's names, as its adapter_model.safetensors holds them."""
    from peft import get_peft_model_state_dict

    yield from get_peft_model_state_dict(model).items()


def reference(model):
    """Context in which `model` (the PEFT model) is the reference policy: the adapter off, as TRL's
    GRPOTrainer does for a new adapter (PEFT's `disable_adapter`)."""
    return model.disable_adapter()


def check_model(model: str, settings: LoraSettings, revision: str | None = None) -> None:
    """Before Ray starts: `settings.target_modules` match modules of `model` (a folder or hub name),
    and vLLM serves adapters for its architecture. Raises `UserError` naming what to change."""
    import transformers
    from peft import get_peft_model

    config = transformers.AutoConfig.from_pretrained(model, revision=revision)
    with torch.device("meta"):  # the modules' names and types, no memory
        built = transformers.AutoModelForCausalLM.from_config(config)
    try:
        get_peft_model(built, peft_config(settings))
    except ValueError as error:
        linear = sorted({name.rsplit(".", 1)[-1] for name, module in built.named_modules() if _is_linear(module)})
        raise UserError(
            f"lora.target_modules {settings.target_modules} matches no module of {model} ({error}); its linear modules "
            f"are {linear} (or use 'all-linear')"
        ) from None
    try:
        from workers.fences.vllm import supports_lora
    except ImportError:  # a driver without vLLM: the engines' own start says it
        return
    for architecture in config.architectures or []:
        if supports_lora(architecture) is False:
            raise UserError(
                f"lora: vLLM cannot serve LoRA adapters for {architecture} ({model}), so the engines could not sample "
                "from the adapter being trained; train the full model (lora: null) or pick a model vLLM serves LoRA for"
            )


def _is_linear(module) -> bool:
    from transformers.pytorch_utils import Conv1D

    return isinstance(module, torch.nn.Linear | Conv1D)
