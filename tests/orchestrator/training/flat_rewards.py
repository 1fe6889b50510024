"""A reward for the dynamic sampling test: every sample of a prompt of even length scores the same,
so its group teaches nothing; the others score their completion's length."""


def half_flat(prompts, completions, **kwargs):
    return [0.5 if len(prompt) % 2 == 0 else len(completion) / 10 for prompt, completion in zip(prompts, completions)]
