"""argparse with a suggestion for a mistyped choice: `sandfleet rnu` -> did you mean run?"""

from __future__ import annotations

import argparse
import difflib
import re
from typing import NoReturn

# argparse's own wording (Lib/argparse.py, _check_value), the same from 3.9 to 3.13.
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)")


class SuggestingParser(argparse.ArgumentParser):
    """An ArgumentParser whose "invalid choice" error names the closest choice.

    Subparsers are made with the parent's class, so subcommands and every `choices=`
    option (--backend, --isolation, ...) get the suggestion too. Exit code 2, as argparse.
    """

    def error(self, message: str) -> NoReturn:
        super().error(message + suggestion(message))


def suggestion(message: str) -> str:
    """ "; did you mean 'X'?" for an argparse invalid-choice message, else ""."""
    match = _INVALID_CHOICE.search(message)
    if match is None:
        return ""
    choices = re.findall(r"'([^']*)'", match.group("choices"))
    close = difflib.get_close_matches(match.group("given"), choices, n=1, cutoff=0.5)
    return f"; did you mean '{close[0]}'?" if close else ""
