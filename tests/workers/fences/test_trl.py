"""The TRL fence: it accepts only the TRL release its private names were read from, those names are
still what the installed TRL calls, and the learner's two uses of them behave as the learner expects.
Stand-ins for the trainer; no model is built."""

import inspect

import pytest
import torch

from workers.fences import trl as fenced_trl


def test_the_installed_trl_is_the_pinned_one():
    fenced_trl.check_version()


@pytest.mark.parametrize("version", ["1.16.0", "1.16.4", "1.16.0+local"])
def test_patch_releases_of_the_pinned_trl_pass(version):
    fenced_trl.check_version(version)


@pytest.mark.parametrize("version", ["1.17.0", "1.15.2", "2.16.0", "1.16.0rc1"])
def test_another_trl_is_refused_naming_both_versions(version):
    with pytest.raises(RuntimeError, match=rf"trl {version} is installed, .* trl 1\.16\.x") as refused:
        fenced_trl.check_version(version)
    assert "workers/fences/trl.py" in str(refused.value)


def test_the_private_names_are_what_the_installed_trl_uses():
    from trl import GRPOTrainer

    parameters = list(inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters)
    assert parameters[:5] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep"]
    source = inspect.getsource(GRPOTrainer)
    assert "self._get_per_token_logps_and_entropies(" in source  # compute_loss's forward pass goes through it
    assert "self.current_gradient_accumulation_steps" in source  # and its loss divides by this
    assert "compute_aux_loss=self.aux_loss_enabled" in source  # the MoE router loss comes from that pass


class _Trainer:
    """What the fence touches of a GRPOTrainer: the logprob forward pass (logprobs 2 * ids)."""

    current_gradient_accumulation_steps = 4

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        logps = (2.0 * input_ids[:, -logits_to_keep:]).requires_grad_()
        return logps, None, None


def test_a_route_gets_trls_pass_and_every_call_the_trainer_makes():
    trainer, seen = _Trainer(), []

    def route(trl_pass, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        seen.append((model, kwargs))
        logps, _, _ = trl_pass(model, input_ids, attention_mask, logits_to_keep, **kwargs)
        return logps + 1.0, None, None

    fenced_trl.route_per_token_logps(trainer, route)
    ids = torch.tensor([[1.0, 2.0, 3.0]])
    logps, _, _ = trainer._get_per_token_logps_and_entropies("model", ids, torch.ones_like(ids), 2, compute_entropy=True)
    assert torch.equal(logps, torch.tensor([[5.0, 7.0]])) and logps.requires_grad
    assert torch.equal(fenced_trl.per_token_logps(trainer, "ref", ids, torch.ones_like(ids), 1), torch.tensor([[7.0]]))
    assert seen == [("model", {"compute_entropy": True}), ("ref", {})]  # the reference pass is routed too


def test_the_fused_head_is_what_trls_pass_calls():
    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer)
    assert "fused_lm_head=True" in source and "add_fused_lm_head(" in source


def test_micro_batches_weighted_by_the_learner_turn_trls_division_off():
    trainer = _Trainer()
    fenced_trl.weight_micro_batches_ourselves(trainer)
    assert trainer.current_gradient_accumulation_steps == 1


def test_trls_loss_reads_the_ratio_after_its_forward_pass_and_only_when_generating_with_vllm():
    """The learner puts `importance_sampling_ratio` (and a stale row's old log-probs) into the inputs
    during `_compute_loss`'s forward pass."""
    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer._compute_loss)
    forward = source.index("self._get_per_token_logps_and_entropies(")
    ratio = source.index('inputs["importance_sampling_ratio"]')
    old = source.index('inputs.get("old_per_token_logps")')
    assert forward < ratio and forward < old
    assert "if self.use_vllm and self.vllm_importance_sampling_correction" in source
    assert 'self._metrics[mode]["clip_ratio/region_mean"].append(' in source


def test_the_correction_is_switched_on_only_for_a_trainer_built_with_it():
    trainer = _Trainer()
    trainer.vllm_importance_sampling_correction = False
    with pytest.raises(ValueError, match="vllm_importance_sampling_correction=False"):
        fenced_trl.correct_sampling(trainer)
    trainer.vllm_importance_sampling_correction, trainer.use_vllm = True, False
    fenced_trl.correct_sampling(trainer)
    assert trainer.use_vllm


def test_loss_metrics_are_averaged_and_emptied():
    trainer = _Trainer()
    trainer._metrics = {"train": {"entropy": [1.0, 3.0], "clip_ratio/region_mean": [float("nan"), 0.5], "kl": []}}
    assert fenced_trl.take_loss_metrics(trainer) == {"entropy": 2.0, "clip_ratio/region_mean": 0.5}
    assert trainer._metrics["train"] == {}
