"""`builtin:math_answer`: the final answer is found where people write it and compared as a value."""

import pytest

from orchestrator.builtin.math_answer import extract_answer, math_answer_reward, normalise
from orchestrator.rewards.functions import resolve


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("so the total is \\boxed{42}.", "42"),
        ("\\boxed{\\frac{1}{2}}", "1/2"),  # nested braces
        ("\\boxed{\\dfrac{3}{4}} is it", "0.75"),
        ("first \\boxed{3}, no wait, \\boxed{5}", "5"),  # the last box wins
        ("\\boxed{x} but also #### 7", "x"),  # a box beats ####
        ("She paid 3 + 4 = 7 dollars.\n#### 1,234", "1234"),  # thousands commas
        ("#### $18.00", "18"),  # dollar sign, trailing .00
        ("#### 18.", "18"),  # a trailing period
        ("The answer is 12 apples, then 13.", "13"),  # else the last number
        ("It is -3", "-3"),
        ("about 50%", "50"),
        ("\\boxed{\\text{ 5 }}", "5"),
        ("0.5", "\\frac{1}{2}"),
        ("\\boxed{ 2 , 000 }", "2000"),
    ],
)
def test_correct_answers_score_one(completion, answer):
    assert math_answer_reward(["q"], [completion], [answer]) == [1.0]


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("#### 17", "18"),
        ("no number here", "3"),
        ("#### 1,234", "1.234"),  # a comma groups thousands; it is no decimal point
        ("3 + 4 = 7. #### 8", "7"),  # the marked answer counts, not an intermediate one
        ("\\boxed{}", "0"),  # an empty box is no answer
    ],
)
def test_wrong_or_missing_answers_score_zero(completion, answer):
    assert math_answer_reward(["q"], [completion], [answer]) == [0.0]


def test_unclosed_box_falls_back_to_the_last_number():
    assert extract_answer("\\boxed{12") == "12"


def test_conversational_completions_are_read_from_the_assistant_message():
    completions = [[{"role": "assistant", "content": "2 + 2 = 4. #### 4"}], [{"role": "assistant", "content": "#### 5"}]]
    assert math_answer_reward([[{"role": "user", "content": "2+2?"}]] * 2, completions, ["4", "4"]) == [1.0, 0.0]


def test_normalise_makes_equal_values_equal():
    assert normalise("\\$1,000.50") == normalise("1000.5") == normalise("2001/2")


def test_registered_as_a_builtin():
    assert resolve("builtin:math_answer") is math_answer_reward
