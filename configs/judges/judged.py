"""A reward an LLM judge gives: the judge's probability that the answer to a yes/no question is yes.

The run config names the judge (`judges: {checker: ...}`); every reward function gets the run's judges
as its `judges` keyword argument, and asks one with all of its samples in one call.

The instruction comes first and the policy's text last, between tags, with `untrusted` making its
control-token strings plain: a completion cannot end the judge's turn or write instructions of its own."""


async def judge_says_yes(prompts, completions, judges, **kwargs):
    judge = judges["checker"]
    questions = [
        f"Is the text between the tags a search for a place? Answer yes or no.\n"
        f"<text>{prompt}{judge.untrusted(completion)}</text>\nAnswer:"
        for prompt, completion in zip(prompts, completions)
    ]
    odds = await judge.choices(questions, [" yes", " no"])  # log-probabilities, over the two choices
    return [2.718281828459045 ** answer[" yes"] for answer in odds]
