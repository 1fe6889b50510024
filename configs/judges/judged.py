"""A reward an LLM judge gives: the judge's probability that the answer to a yes/no question is yes.

The run config names the judge (`judges: {checker: ...}`); every reward function gets the run's judges
as its `judges` keyword argument, and asks one with all of its samples in one call."""


async def judge_says_yes(prompts, completions, judges, **kwargs):
    questions = [
        f"{prompt}{completion}\nIs this a search for a place? Answer yes or no:"
        for prompt, completion in zip(prompts, completions)
    ]
    odds = await judges["checker"].choices(questions, [" yes", " no"])  # log-probabilities, over the two choices
    return [2.718281828459045 ** answer[" yes"] for answer in odds]
