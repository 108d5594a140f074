import json

import pytest

from workers.science.prompts import (
    arithmetic_prompt_set,
    extract_arithmetic,
    extract_boxed,
    extract_gsm8k,
    load_jsonl_prompt_set,
    normalize_number,
)


def test_it_generates_the_same_problems_for_the_same_seed():
    a = arithmetic_prompt_set(50, level=3, seed=1)
    b = arithmetic_prompt_set(50, level=3, seed=1)
    c = arithmetic_prompt_set(50, level=3, seed=2)
    assert a.problems == b.problems and a.problems != c.problems


def test_held_out_split_is_disjoint_from_train():
    train = {p.prompt for p in arithmetic_prompt_set(2000, level=2, seed=0, split="train")}
    test = {p.prompt for p in arithmetic_prompt_set(500, level=2, seed=0, split="test")}
    assert train and test and not (train & test)


@pytest.mark.parametrize("level,width", [(1, 4), (2, 6), (3, 8)])
def test_prompts_are_fixed_width_and_answers_correct(level, width):
    for p in arithmetic_prompt_set(100, level=level, seed=0):
        assert len(p.prompt) == width
        a, b = p.prompt[:-1].split("+")
        assert int(p.answer) == int(a) + int(b)


def test_multiplication_level():
    for p in arithmetic_prompt_set(50, level=4, seed=0):
        a, b = p.prompt[:-1].split("*")
        assert int(p.answer) == int(a) * int(b)


def test_grading_is_exact_on_reversed_digits():
    ps = arithmetic_prompt_set(2, level=3, seed=0)
    right = ps.problems[0].answer[::-1]
    wrong = str(int(ps.problems[1].answer) + 1)[::-1]
    assert ps.grade([right, wrong]) == [True, False]
    assert extract_arithmetic("07") == "70" and extract_arithmetic("7x") is None


def test_gsm8k_and_math_extraction():
    assert extract_gsm8k("so 3 + 4 = 7\n#### 1,234") == "1234"
    assert extract_gsm8k("the answer is 42.") == "42"
    assert extract_boxed(r"thus \boxed{\frac{1}{2}} and") == r"\frac{1}{2}"
    assert extract_boxed(r"\boxed{ 12 } then \boxed{7}") == "7"
    assert normalize_number("+3.00") == "3"


def test_it_loads_gsm8k_and_math_jsonl(tmp_path):
    g = tmp_path / "gsm.jsonl"
    g.write_text("\n".join(json.dumps(r) for r in [
        {"question": "1+1?", "answer": "1+1=2\n#### 2"},
        {"question": "2*3?", "answer": "#### 6"},
    ]))
    ps = load_jsonl_prompt_set(g)
    assert ps.name.startswith("gsm8k") and [p.answer for p in ps] == ["2", "6"]
    assert ps.grade(["The answer is 2", "#### 5"]) == [True, False]
    m = tmp_path / "math.jsonl"
    m.write_text(json.dumps({"problem": "half?", "solution": r"It is \boxed{\frac{1}{2}}."}) + "\n")
    ms = load_jsonl_prompt_set(m)
    assert ms.grade([r"so \boxed{\frac{1}{2}}"]) == [True]
    with pytest.raises(FileNotFoundError):
        load_jsonl_prompt_set(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"x": 1}\n')
    with pytest.raises(ValueError, match="expected GSM8K"):
        load_jsonl_prompt_set(bad)


def test_the_worked_solution_by_hand():
    from workers.science.prompts import extract_worked, worked_solution

    assert worked_solution(4821, 9377) == "1+7+0=08 2+7+0=09 8+3+0=11 4+9+1=14 =14198"
    assert worked_solution(1000, 1000) == "0+0+0=00 0+0+0=00 0+0+0=00 1+1+0=02 =2000"
    assert extract_worked("1+7+0=08 =14198") == "14198" and extract_worked("1+7+0=0") == "0"
    assert extract_worked("no answer") is None and extract_worked("3+4=x") is None


def test_level_6_responses_are_long_and_an_early_digit_changes_what_follows():
    from workers.science.prompts import arithmetic_target_text, worked_solution

    ps = arithmetic_prompt_set(200, level=6, seed=0)
    lengths = [len(arithmetic_target_text(p.prompt, 6)) + 1 for p in ps]  # + EOS; one token per character
    assert 30 <= min(lengths) and max(lengths) <= 100
    assert ps.grade([arithmetic_target_text(p.prompt, 6) for p in ps]) == [True] * 200
    # the first column's sum decides the carry into the second column and the answer
    a, b = worked_solution(4825, 1111).split(" "), worked_solution(4829, 1111).split(" ")
    assert a[0] != b[0] and a[1] != b[1] and a[-1] != b[-1]


def test_gsm8k_answers_graded_by_hand():
    """The reference after '####'; a response's '####' answer, else its last number; commas,
    '$' and a trailing '.0' normalised away."""
    from workers.science.prompts import Problem, PromptSet

    ps = PromptSet("gsm8k:hand", [Problem("q", "18")] * 7, extract_gsm8k)
    assert ps.grade([
        "She sells 9 eggs at $2 each, so she makes $18.",      # right: the last number
        "#### 18",                                            # right: the marked answer
        "9 * 2 = 18.0 dollars",                               # right: trailing .0
        "The answer is $1,8.",                                # a comma inside: 18 after normalising
        "She makes 18 dollars, then 20 more, 38 in total",    # wrong: the last number is 38
        "#### 17\nactually 18",                               # wrong: the marked answer wins
        "I do not know",                                      # no answer
    ]) == [True, True, True, True, False, False, False]
    assert extract_gsm8k("#### $1,234.00") == "1234" and extract_gsm8k("no digits") is None
