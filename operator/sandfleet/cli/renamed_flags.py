"""Flags renamed to the settings' public names keep their old spelling for a while: it still
sets the setting, and leaves a warning that main() prints with the settings' notices."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

_NOTICES = "deprecated_flag_notices"
"""The namespace attribute the notices collect in."""


class RenamedFlag(argparse.Action):
    """Stores like `store`. The first option string is the flag's name; any further one is
    an old spelling, which works and is reported as deprecated."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        name = self.option_strings[0]
        if option_string is not None and option_string != name:
            notices = [*flag_notices(namespace), f"{option_string} is deprecated: use {name}"]
            setattr(namespace, _NOTICES, notices)


def flag_notices(args: argparse.Namespace) -> list[str]:
    """The warnings the old spellings on this command line left, in order."""
    notices: list[str] = getattr(args, _NOTICES, None) or []
    return notices
