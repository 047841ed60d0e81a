"""Model-facing texts: default prompts, seed-format template filling, nudges and turn notices."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from typing import Protocol


class PathsView(Protocol):
    """The sandbox layout as the model sees it (SandboxPaths satisfies it)."""

    @property
    def working_dir(self) -> str: ...

    @property
    def input_dir(self) -> str: ...

    @property
    def output_dir(self) -> str: ...

    @property
    def answer_file(self) -> str: ...


DEFAULT_SYSTEM_PROMPT = """\
You are an autonomous agent with your own Linux computer: a sandbox where you can run any \
shell command, install packages, write and run programs, and read and write files.

How to work:
- Explore freely. Look at the files you were given, try things, and use whatever tools \
the sandbox offers.
- Do computation in files, not in your head: write a script, run it, read its output. \
Prefer exact results from code over arithmetic in prose.
- Check your work with the sandbox before you rely on it (run tests, re-run scripts, \
inspect outputs).
- Nobody will answer questions; decide for yourself and keep going.

Layout:
- Working directory: {working_dir}
- Input files for the task (if any): {input_dir}
- Put every file you produce in: {output_dir}
- Final answer: write it to {answer_file} (just the answer, no explanation).

Every reply must call a tool. When the task is done and the answer file is written, call \
`submit`.
"""

DEFAULT_INSTANCE_PROMPT = """\
{problem_statement}

Remember: write the final answer to {answer_file}, then call `submit`.
"""

_NUDGE = """\
Your last reply did not call any tool, and every reply must call one. Carry on with the \
task on your own: nobody is available to help. Use `execute_bash` or \
`str_replace_editor` to make progress, and when you are done write the answer to \
{answer_file} and call `submit`."""


_PLACEHOLDERS = (
    "problem_statement", "working_dir", "input_dir", "output_dir", "answer_file",
    "command_docs", "demo",
)  # fmt: skip
"""The names template_values fills."""


def template_values(paths: PathsView, problem_statement: str = "") -> dict[str, str]:
    """Placeholders a prompt template may use (the seed's plus ours)."""
    return {
        "problem_statement": problem_statement,
        "working_dir": paths.working_dir,
        "input_dir": paths.input_dir,
        "output_dir": paths.output_dir,
        "answer_file": paths.answer_file,
        # The seed project's system prompts carry these; it fills them with nothing.
        "command_docs": "",
        "demo": "",
    }


MAX_FORMAT_WIDTH = 10_000
"""Largest width or precision a template placeholder may ask for ({x:>80} is fine; a width
of 10**12 would make one string of that many characters)."""

_FORMAT_SPEC = re.compile(
    r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d+)?[_,]?(?:\.(?P<precision>\d+))?[s]?", re.DOTALL
)


def template_problem(template: str, values: Iterable[str] = _PLACEHOLDERS) -> str | None:
    """Why `template` cannot be filled (None: it can): a placeholder of `values` with a format
    spec that is not a plain string format, or that asks for more than MAX_FORMAT_WIDTH."""
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError:
        return None  # stray braces: filled textually, which cannot go wrong
    known = set(values)
    for _, field, spec, conversion in fields:
        if field not in known or not spec:
            continue
        match = _FORMAT_SPEC.fullmatch(spec)
        placeholder = "{" + field + ("!" + conversion if conversion else "") + ":" + spec + "}"
        if match is None:
            return f"the placeholder {placeholder} has a format spec a text value cannot take"
        for part in ("width", "precision"):
            number = match.group(part)
            if number is not None and int(number) > MAX_FORMAT_WIDTH:
                return (
                    f"the placeholder {placeholder} asks for a {part} of {number} characters "
                    f"(at most {MAX_FORMAT_WIDTH})"
                )
    return None


def unknown_placeholders(template: str, values: Iterable[str] = _PLACEHOLDERS) -> list[str]:
    """The `{name}` placeholders of `template` that are not among `values`: they stay in
    the prompt as written, which is almost always a typo ({workdir} for {working_dir}).

    Only identifier-like names count, so a JSON sample or code in the template is no
    finding; a template with stray braces is filled textually and has none either.
    """
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError:
        return []
    known = set(values)
    unknown: list[str] = []
    for _, field, _, _ in fields:
        if field and field.isidentifier() and field not in known and field not in unknown:
            unknown.append(field)
    return unknown


def known_placeholders() -> tuple[str, ...]:
    return _PLACEHOLDERS


def fill_template(template: str, values: Mapping[str, str]) -> str:
    """str.format-style filling that leaves unknown placeholders as they are.

    Only `{name}` placeholders of `values` are filled, with an optional !r/!s/!a and a safe
    format spec (template_problem); `{name.attr}`, `{name[0]}`, unknown names and unsafe
    specs stay as written, so a template can neither reach attributes nor exhaust memory.
    A template with stray braces (e.g. a code sample) cannot go through str.format's
    parser at all; then only the known placeholders are replaced, textually.
    """
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError:
        for key, value in values.items():
            template = template.replace("{" + key + "}", value)
        return template
    parts: list[str] = []
    for literal, field, spec, conversion in fields:
        parts.append(literal)
        if field is None:
            continue
        written = "{" + field + ("!" + conversion if conversion else "")
        written += (":" + spec if spec else "") + "}"
        unsafe = conversion not in (None, "r", "s", "a")
        if unsafe or field not in values or template_problem(written, (field,)) is not None:
            parts.append(written)
            continue
        text = values[field]
        if conversion == "r":
            text = repr(text)
        elif conversion == "a":
            text = ascii(text)
        parts.append(format(text, spec or ""))
    return "".join(parts)


def no_tool_call_nudge(paths: PathsView) -> str:
    return _NUDGE.format(answer_file=paths.answer_file)


def remaining_turns_notice(remaining: int, *, notice_turns: int, paths: PathsView) -> str:
    """Suffix for the last message of a turn once the end is near ("" before that).

    `remaining` counts the model calls still allowed after the current turn.
    """
    if remaining <= 0 or remaining > notice_turns:
        return ""
    if remaining == 1:
        return (
            "\nSteps remaining: 1. This is your last step: write your final answer to "
            f"{paths.answer_file} and call `submit` now."
        )
    return f"\nSteps remaining: {remaining}"
