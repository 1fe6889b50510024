"""The bench's realistic case: its model's completions end at EOS with varied lengths around the
mean asked for, under HF generate (so under every system the bench compares)."""

import statistics


def test_the_stop_at_eos_model_ends_completions_at_eos_with_varied_lengths(tiny):
    import torch
    from transformers import AutoModelForCausalLM

    from orchestrator.bench.model import bench_model

    folder = bench_model(hidden=64, layers=2, heads=4, mean_length=20)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    eos = model.config.eos_token_id
    torch.manual_seed(0)
    prompt = torch.randint(1, model.config.vocab_size, (1, 6))
    out = model.generate(
        input_ids=prompt,
        do_sample=True,
        top_k=0,
        num_return_sequences=200,
        max_new_tokens=200,
        pad_token_id=eos,
        eos_token_id=eos,
    )
    completions = out[:, prompt.shape[1] :].tolist()
    lengths = [row.index(eos) + 1 for row in completions if eos in row]
    assert len(lengths) >= 195  # (almost) every completion ends at EOS before the cap
    assert 14 <= statistics.mean(lengths) <= 28 and max(lengths) >= 3 * min(lengths)
