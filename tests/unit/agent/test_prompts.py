"""Prompt templates (seed format), the no-tool-call nudge and the turn notices."""

from __future__ import annotations

from sandfleet.agent.prompts import (
    DEFAULT_SYSTEM_PROMPT,
    fill_template,
    no_tool_call_nudge,
    remaining_turns_notice,
    template_values,
)
from sandfleet.sandbox.facade import SandboxPaths

PATHS = SandboxPaths.under("/work")


def test_seed_placeholders_and_the_answer_file_are_filled() -> None:
    values = template_values(PATHS, "What is 2+2?")
    text = fill_template(
        "{command_docs}Task: {problem_statement} in {working_dir}; read {input_dir}, "
        "write {output_dir} and {answer_file}{demo}",
        values,
    )
    assert text == (
        "Task: What is 2+2? in /work; read /work/input, write /work/output and "
        "/work/output/answer.txt"
    )


def test_unknown_placeholders_are_left_alone() -> None:
    assert (
        fill_template("{problem_statement} {unknown}", {"problem_statement": "p"}) == "p {unknown}"
    )


def test_a_template_with_stray_braces_still_gets_its_placeholders() -> None:
    template = "def f(): return {1: 2}[1]  # {problem_statement} }"
    assert fill_template(template, {"problem_statement": "p"}) == "def f(): return {1: 2}[1]  # p }"


def test_the_default_system_prompt_names_the_layout() -> None:
    text = fill_template(DEFAULT_SYSTEM_PROMPT, template_values(PATHS))
    for path in ("/work", "/work/input", "/work/output", "/work/output/answer.txt"):
        assert path in text
    assert "submit" in text


def test_the_nudge_asks_for_a_tool_call_and_names_the_answer_file() -> None:
    nudge = no_tool_call_nudge(PATHS)
    assert "did not call any tool" in nudge
    assert "/work/output/answer.txt" in nudge


def test_notices_appear_only_over_the_last_turns_and_end_with_a_submit_warning() -> None:
    notices = [remaining_turns_notice(r, notice_turns=3, paths=PATHS) for r in (5, 4, 3, 2, 1, 0)]
    assert notices[:2] == ["", ""]
    assert notices[2:4] == ["\nSteps remaining: 3", "\nSteps remaining: 2"]
    assert notices[4].startswith("\nSteps remaining: 1. This is your last step")
    assert "call `submit` now" in notices[4]
    assert notices[5] == ""
