"""The CLI reference page, from the argparse parser `sandfleet` itself parses with."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from sandfleet.reference.markdown import GENERATED_NOTE, cell, code, table

USAGE_WIDTH = 88
"""Usage lines are wrapped at a fixed width, so the page does not depend on the terminal."""


def cli_page(parser: argparse.ArgumentParser) -> str:
    """Markdown for `parser` and each of its subcommands: usage, text, every option."""
    lines = [
        f"# Command line: `{parser.prog}`",
        "",
        GENERATED_NOTE.format(source="the CLI's argument parser (`sandfleet.cli.main`)"),
        "",
        *_text_block(parser.description),
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    commands = list(_subcommands(parser))
    lines += [f"| [`{name}`](#{name}) | {cell(summary)} |" for name, summary, _ in commands]
    lines += ["", *_text_block(parser.epilog)]
    for name, _summary, sub in commands:
        lines += ["", f"## `{name}` {{#{name}}}", "", *_parser_section(sub)]
    return "\n".join(lines) + "\n"


def _subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of every subcommand, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _parser_section(parser: argparse.ArgumentParser) -> list[str]:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    usage = formatter.format_help().strip().removeprefix("usage: ")
    lines = ["```text", usage, "```", "", *_text_block(parser.description)]
    for group in parser._action_groups:
        rows = [_row(parser, action) for action in group._group_actions if _shown(action)]
        if rows:
            title = group.title or "options"
            lines += ["", f"**{title}**", ""]
            lines += table(["option", "value", "default", "help"], rows)
    if parser.epilog:
        lines += ["", *_text_block(parser.epilog)]
    return lines


def _shown(action: argparse.Action) -> bool:
    return action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)


def _row(parser: argparse.ArgumentParser, action: argparse.Action) -> list[str]:
    names = ", ".join(action.option_strings) or action.dest
    return [code(names), _value(action), _default(action), cell(_help(parser, action))]


def _value(action: argparse.Action) -> str:
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return " \\| ".join(code(choice) for choice in action.choices)
    if action.nargs == 0:
        return "-"
    metavar = action.metavar or action.dest.upper()
    return code(metavar if isinstance(metavar, str) else " ".join(metavar))


def _default(action: argparse.Action) -> str:
    default = action.default
    if default is None or default is argparse.SUPPRESS or action.nargs == 0:
        return "-"
    return code(default)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:  # argparse's own placeholders (%(default)s, %(prog)s)
        params = {**vars(action), "prog": parser.prog}
        text = text % params
    return text


def _text_block(text: str | None) -> list[str]:
    """Help text as argparse prints it (indented examples kept) in a plain block."""
    if not text or not text.strip():
        return []
    return ["```text", text.strip("\n"), "```"]
