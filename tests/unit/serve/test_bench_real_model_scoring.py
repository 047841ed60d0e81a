"""bench/bench_serve_real_model.py's pure parts: each question's answer check, the rows it
sums per mode and the table it prints (the run itself needs the real model: not in CI)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.bench_serve_real_model import QUESTIONS, Answer, number, only, summarize, table, word

CHECKS = {q.name: q.check for q in QUESTIONS}


@pytest.mark.parametrize(
    ("question", "answer", "right"),
    [
        ("product-minus", "7919 * 6007 - 123456 = 47,445,977.", True),
        ("product-minus", "47445977", True),
        ("product-minus", "147445977", False),  # a longer number is not the number
        ("product-minus", "47445977.5", False),
        ("prime-sum", "The sum is 277050", True),
        ("prime-sum", "277051", False),
        ("north-total", "335", True),
        ("north-total", "3350", False),
        ("top-product", "Coffee has the largest total (815).", True),
        ("top-product", "coffees", False),
        ("reversed", '"xobdnas"', True),
        ("reversed", "xobdnas.", True),
        ("reversed", "The word backwards is xobdnas", False),  # "only that word"
        ("six-words", "the sea is vast and blue.", True),
        ("six-words", "The sea is vast and blue.", False),  # not all lowercase
        ("six-words", "the sea is vast and deep blue.", False),
    ],
)
def test_each_question_checks_its_answer(question: str, answer: str, right: bool) -> None:
    assert CHECKS[question](answer) is right


def test_the_checkers_build_from_their_argument() -> None:
    assert number(12)("12 apples") and not number(12)("112")
    assert word("tea")("Tea.") and not word("tea")("teapot")
    assert only(r"a+")(" `aaa` ") and not only(r"a+")("aab")


def _sandbox(seconds: float, *, share: float | None, tool_s: float, model_s: float,
             wall_s: float, turns: int, right: bool = True) -> Answer:  # fmt: skip
    books: dict[str, Any] = {"turns": turns, "tool_time_s": tool_s, "model_time_s": model_s,
                             "wall_time_s": wall_s, "environment_token_share": share}  # fmt: skip
    return Answer("q", "sandbox", right, seconds, 1000, 100, "x", books)


def test_a_mode_sums_its_requests_and_weights_time_shares_by_wall_time() -> None:
    answers = [
        _sandbox(10.0, share=0.2, tool_s=1.0, model_s=8.0, wall_s=10.0, turns=2),
        _sandbox(30.0, share=0.4, tool_s=0.0, model_s=29.0, wall_s=30.0, turns=4, right=False),
        Answer("q", "sandbox", False, 5.0, 0, 0, "", error="upstream down"),
    ]
    row = summarize(answers, elapsed_s=45.0)
    assert row["requests"] == 3 and row["failed"] == 1 and row["right"] == 1
    assert row["qpm"] == pytest.approx(4.0)  # 3 requests in 45 s, one after another
    assert row["p50_s"] == 10.0  # of the two that answered
    assert row["prompt_tokens"] == 1000 and row["turns"] == 3.0
    assert row["env_token_share"] == pytest.approx(0.3)
    assert row["env_time_share"] == pytest.approx(1.0 / 40.0)
    assert row["model_time_share"] == pytest.approx(37.0 / 40.0)


def test_vanilla_has_no_sandbox_columns_and_the_table_says_so() -> None:
    vanilla = summarize([Answer("q", "vanilla", True, 2.0, 50, 8, "ok")], elapsed_s=2.0)
    assert vanilla["turns"] is None and vanilla["env_time_share"] is None
    lines = table({"vanilla": vanilla}).splitlines()
    assert lines[0].startswith("| mode | requests | right | QPM (sequential)")
    assert lines[2] == "| vanilla | 1 | 1/1 | 30.00 | 2.0 s | 50 | 8 | - | - | - | - |"
