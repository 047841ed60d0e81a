"""docs/trajectory-format.md stays in step with the code that writes trajectories: every
record kind written has a section, every section a writer, and every key a writer puts in a
record (notice events included) is named in its kind's section.

The writers are found by reading the source (dict displays with a "kind" key in the modules
that write trajectories), so a new kind or key fails this test until the doc says what it is.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections import defaultdict
from pathlib import Path

from sandfleet.agent import AgentResult, StopReason

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "trajectory-format.md"
PACKAGE = ROOT / "operator" / "sandfleet"
WRITERS = [
    *sorted((PACKAGE / "agent").glob("*.py")),
    *sorted((PACKAGE / "trajectory").glob("*.py")),
    PACKAGE / "cli" / "eval_samples.py",
]
"""The modules that build trajectory records (the agent loop's and the eval's LLM mode)."""
READ_ONLY_KINDS = {"task_inputs"}
"""Kinds only read (older files), documented under "Older kinds"."""


@dataclasses.dataclass
class Written:
    keys: dict[str, set[str]] = dataclasses.field(default_factory=lambda: defaultdict(set))
    notice_events: dict[str, set[str]] = dataclasses.field(default_factory=lambda: defaultdict(set))


def string_constants(trees: list[ast.Module]) -> dict[str, str]:
    """Module-level NAME = "text" assignments (e.g. TOKENS_KIND), to resolve kind names."""
    constants: dict[str, str] = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                target, value = node.targets[0], node.value.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Constant):
                target, value = node.target, node.value.value  # NAME: Final = "text"
            else:
                continue
            if isinstance(target, ast.Name) and isinstance(value, str):
                constants[target.id] = value
    return constants


def written_records() -> Written:
    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in WRITERS]
    constants = string_constants(trees)
    written = Written()
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Dict):
                continue
            fields = {
                key.value: value
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            }
            if "kind" not in fields:
                continue
            kind_node = fields["kind"]
            if isinstance(kind_node, ast.Constant):
                kind = str(kind_node.value)
            elif isinstance(kind_node, ast.Name):
                kind = constants[kind_node.id]
            else:
                raise AssertionError(f"a record kind the test cannot read: {ast.dump(kind_node)}")
            keys = set(fields) - {"kind"}
            written.keys[kind] |= keys
            event = fields.get("event")
            if kind == "notice" and isinstance(event, ast.Constant):
                written.notice_events[str(event.value)] |= keys - {"event", "turn"}
    # The result record spreads AgentResult.to_record() into the dict.
    result = AgentResult("t", StopReason.SUBMITTED, None, 0, 0, 0, 0.0, 0.0, 0.0, [], None, None)
    written.keys["result"] |= set(result.to_record())
    return written


def doc_sections() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    parts = re.split(r"^### `([a-z_]+)`\s*$", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1].split("\n## ")[0] for i in range(1, len(parts), 2)}


def test_every_written_kind_is_documented_and_every_documented_kind_is_written() -> None:
    written = written_records()
    assert set(written.keys) >= {"meta", "message", "usage", "tool_call", "observation"}
    assert set(doc_sections()) == set(written.keys)


def test_every_key_of_every_kind_is_named_in_its_section() -> None:
    sections = doc_sections()
    for kind, keys in written_records().keys.items():
        missing = sorted(key for key in keys if f"`{key}`" not in sections[kind])
        assert not missing, f"{DOC.name}, kind {kind}: undocumented keys {missing}"


def test_every_notice_event_and_its_keys_are_documented() -> None:
    section = doc_sections()["notice"]
    events = written_records().notice_events
    assert {"max_tokens_reduced", "context_shortened", "resumed", "suspended"} <= set(events)
    for event, keys in events.items():
        row = next((line for line in section.splitlines() if f"| `{event}` |" in line), None)
        assert row is not None, f"notice event {event} is not documented"
        missing = sorted(key for key in keys if f"`{key}`" not in row)
        assert not missing, f"notice event {event}: undocumented keys {missing}"


def test_read_only_kinds_are_documented_as_older_kinds() -> None:
    older = DOC.read_text(encoding="utf-8").split("## Older kinds")[1]
    for kind in READ_ONLY_KINDS:
        assert f"`{kind}`" in older
