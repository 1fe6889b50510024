"""A LoRA learner (`lora:`) through TRL and PEFT, on the tiny model, without Ray: only the adapter
trains, the engines are sent the base weights under their Hugging Face names and the adapter under
PEFT's, the reference policy is the base model, and a checkpoint is PEFT's adapter folder that
resumes bit-exact."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError
from orchestrator.contracts.lora import LoraSettings
from tests.workers.learner.test_grpo import _batch
from workers.learner import lora
from workers.learner.grpo import GRPOLearner


def _config(**changes) -> TrainConfig:
    settings = {"num_generations": 2, "prompts_per_step": 2, "learning_rate": 2e-2, "temperature": 1.5, "max_steps": 5}
    return TrainConfig(**settings, lora=LoraSettings(r=4, lora_alpha=8), **changes)


@pytest.fixture(scope="module")
def trained(tiny):
    """A LoRA learner after two steps (the adapter's B matrices start at zero; now they are not)."""
    learner = GRPOLearner(_config(), str(tiny.model_dir), str(tiny.tokenizer_dir))
    for _ in range(2):
        learner.train_step(_batch(learner))
    return learner


def _logps(model, batch) -> torch.Tensor:
    """Log-probs of the batch's completions under `model`, on the CPU (a learner's model may be on a GPU)."""
    device = next(model.parameters()).device
    prompt, completion = (torch.as_tensor(batch[key], device=device) for key in ("prompt_ids", "completion_ids"))
    ids = torch.cat([prompt, completion], dim=1)
    mask = torch.cat([torch.as_tensor(batch[key], device=device) for key in ("prompt_mask", "completion_mask")], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, prompt.size(1) - 1 : -1] / 1.5
    logps = torch.log_softmax(logits, -1).gather(-1, completion[..., None])[..., 0]
    return (logps * torch.as_tensor(batch["completion_mask"], device=device)).cpu()


def _inputs(learner, batch) -> dict[str, torch.Tensor]:
    return {key: torch.as_tensor(value, device=learner.device) for key, value in batch.items() if key.endswith(("_ids", "_mask"))}


def test_only_the_adapter_trains_and_the_engines_get_base_names_then_peft_names(tiny, trained):
    original = AutoModelForCausalLM.from_pretrained(tiny.model_dir).state_dict()
    sent = list(trained.named_weights())
    base = [(name, tensor) for name, tensor in sent if not name.startswith("base_model.model.")]
    adapter = [name for name, _ in sent if name.startswith("base_model.model.")]
    assert [name for name, _ in base] == list(original)  # vLLM's loader takes these names
    assert all(torch.equal(tensor.cpu(), original[name]) for name, tensor in base)  # the base never moved
    assert adapter and all(".lora_A.weight" in name or ".lora_B.weight" in name for name in adapter)
    assert [name for name, _ in sent] == [name for name, _ in base] + adapter  # base first, then the adapter
    only = list(trained.named_weights(adapter_only=True))
    assert [name for name, _ in only] == adapter
    assert any(name.endswith("lora_B.weight") and tensor.abs().sum() > 0 for name, tensor in only)


def test_the_reference_policy_is_the_base_model(tiny, trained):
    batch = _batch(trained)
    base = AutoModelForCausalLM.from_pretrained(tiny.model_dir)
    inputs = _inputs(trained, batch)
    reference = (trained._reference_logps(inputs) * inputs["completion_mask"]).cpu()
    assert torch.allclose(reference, _logps(base, batch), atol=1e-5)
    policy = _logps(trained.trainer.accelerator.unwrap_model(trained.model), batch)
    assert (policy - reference).abs().max() > 1e-3  # the adapter changed the policy; the reference ignores it


def test_kl_term_with_lora_trains(tiny):
    learner = GRPOLearner(_config(beta=0.1), str(tiny.model_dir), str(tiny.tokenizer_dir))
    learner.train_step(_batch(learner))
    second = learner.train_step(_batch(learner))
    assert np.isfinite(second["loss"]) and second["kl"] > 0


def test_a_checkpoint_is_a_peft_adapter_folder_that_resumes_bit_exact(tiny, trained, tmp_path):
    from peft import PeftModel

    trained.save(str(tmp_path))
    assert (tmp_path / "adapter_config.json").is_file() and (tmp_path / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "model.safetensors").exists()  # the adapter, not the model
    assert lora.base_of(str(tmp_path)) == str(tiny.model_dir)
    batch = _batch(trained)
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny.model_dir), str(tmp_path))
    learner_model = trained.trainer.accelerator.unwrap_model(trained.model)
    assert torch.allclose(_logps(loaded, batch), _logps(learner_model, batch), atol=1e-6)

    resumed = GRPOLearner(_config(), str(tiny.model_dir), str(tiny.tokenizer_dir))  # the run's model, then the adapter
    resumed.load_state(str(tmp_path))
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(resumed.named_weights(), trained.named_weights()))
    after_resume, after_original = resumed.train_step(batch), trained.train_step(batch)
    assert after_resume["loss"] == after_original["loss"]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(resumed.named_weights(), trained.named_weights()))


def test_a_resume_with_other_lora_settings_is_named_before_anything_starts(trained, tmp_path):
    trained.save(str(tmp_path))
    assert lora.changed_settings(str(tmp_path), LoraSettings(r=4, lora_alpha=8)) == []
    assert lora.changed_settings(str(tmp_path), LoraSettings(r=8, lora_alpha=8)) == ["r: 4 -> 8"]
    assert lora.changed_settings(str(tmp_path), LoraSettings(r=4, lora_alpha=8, target_modules=["q_proj"])) == [
        "target_modules: all-linear -> ['q_proj']"
    ]


def test_target_modules_that_match_nothing_are_refused_with_the_models_linear_modules(tiny):
    lora.check_model(str(tiny.model_dir), LoraSettings(target_modules=["q_proj", "v_proj"]))
    with pytest.raises(UserError) as refused:
        lora.check_model(str(tiny.model_dir), LoraSettings(target_modules=["c_attn"]))
    message = str(refused.value)
    assert "lora.target_modules ['c_attn'] matches no module" in message
    assert "'q_proj'" in message and "'down_proj'" in message and "all-linear" in message


def test_a_model_vllm_serves_no_adapters_for_is_refused(tmp_path):
    pytest.importorskip("vllm", reason="vLLM's model registry says which architectures it serves LoRA for")
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=32)).save_pretrained(tmp_path)
    with pytest.raises(UserError, match=r"lora: vLLM cannot serve LoRA adapters for GPT2LMHeadModel"):
        lora.check_model(str(tmp_path), LoraSettings(target_modules=["c_attn"]))


def test_the_reference_is_trls_own_for_a_new_adapter(trained):
    """TRL's GRPOTrainer takes the reference log-probs of a PEFT model under its `use_adapter(model,
    None)` (no "ref" adapter: a new adapter); ours are the same numbers."""
    from trl.trainer.utils import use_adapter

    batch = _batch(trained)
    inputs = _inputs(trained, batch)
    model = trained.trainer.accelerator.unwrap_model(trained.model)
    assert "ref" not in model.peft_config
    with torch.no_grad(), use_adapter(model, adapter_name=None):
        trls = trained._logps(trained.model, inputs)
    with torch.no_grad():
        ours = trained._reference_logps(inputs)
    assert torch.equal(ours, trls)
