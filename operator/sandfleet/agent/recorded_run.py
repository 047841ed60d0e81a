"""What a trajectory says about a run that has not finished: ResumeState, rebuilt from records.

The records are checked to be in an order the loop can have written; anything else is a
ResumeError. Tool calls are never run twice: a call of the interrupted turn without an
observation may have had side effects, so the model is told that its result was lost.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from sandfleet.agent.context_shortening import clip_observation
from sandfleet.agent.model import Usage
from sandfleet.agent.prompts import no_tool_call_nudge, remaining_turns_notice
from sandfleet.agent.results import TurnTiming
from sandfleet.agent.resume_types import (
    RecordedPaths,
    ResumeError,
    ResumeState,
    TranscriptEntry,
    transcript_messages,
)
from sandfleet.tool_calls import SUBMIT, ToolCall
from sandfleet.trajectory.format import FORMAT_VERSION

__all__ = [
    "LOST_RESULT_OBSERVATION",
    "NOT_RUN_OBSERVATION",
    "RecordedPaths",
    "ResumeError",
    "ResumeState",
    "TranscriptEntry",
    "rebuild_state",
    "transcript_messages",
]

LOST_RESULT_OBSERVATION = (
    "The result of this call was lost: the controller running this session restarted while "
    "the call was running. The call may or may not have taken effect; check the sandbox's "
    "state before relying on it or running it again."
)
NOT_RUN_OBSERVATION = (
    "This call was not run: the controller running this session restarted before reaching "
    "it. Run it again if you still need it."
)


@dataclasses.dataclass
class _Turn:
    number: int
    text: str
    calls: list[ToolCall]
    declared: bool
    """The assistant record lists the calls (older trajectories only have tool_call records)."""
    started: set[str] = dataclasses.field(default_factory=set)
    outputs: dict[str, str] = dataclasses.field(default_factory=dict)
    nudge: str | None = None
    usage: Usage = dataclasses.field(default_factory=Usage)
    model_s: float = 0.0
    tool_s: float = 0.0

    @property
    def submitted(self) -> bool:
        return any(c.name == SUBMIT and c.call_id in self.started for c in self.calls)

    def call(self, call_id: str) -> ToolCall | None:
        return next((c for c in self.calls if c.call_id == call_id), None)


def rebuild_state(records: Sequence[Mapping[str, Any]]) -> ResumeState:
    """The state of the run `records` describe (a result record among them is ignored)."""
    return _Rebuilder().rebuild(records)


class _Rebuilder:
    """Walks the records once, checking they are in an order the loop can have written."""

    def __init__(self) -> None:
        self._meta: Mapping[str, Any] | None = None
        self._paths: RecordedPaths | None = None
        self._system: str | None = None
        self._user: str | None = None
        self._turns: list[_Turn] = []
        self._max_tokens: int | None = None
        self._clipped: set[tuple[int, str]] = set()
        """(turn, call_id) of observations a context_shortened notice clipped."""
        self._where = ""

    def rebuild(self, records: Sequence[Mapping[str, Any]]) -> ResumeState:
        if not records:
            raise ResumeError("the trajectory is empty: the run never started")
        for number, record in enumerate(records, start=1):
            self._where = f"record {number}"
            if not isinstance(record, Mapping):
                raise self._garbled("it is not a JSON object")
            kind = record.get("kind")
            if not isinstance(kind, str):
                raise self._garbled("it has no kind")
            self._where = f"record {number} ({kind})"
            if number == 1 and kind != "meta":
                raise ResumeError("the trajectory does not start with a meta record")
            take = {
                "meta": self._take_meta,
                "message": self._take_message,
                "usage": self._take_usage,
                "tool_call": self._take_tool_call,
                "observation": self._take_observation,
                "notice": self._take_notice,
            }.get(kind)
            if take is not None:  # readers ignore kinds they do not know
                take(record)
        return self._state()

    def _garbled(self, why: str) -> ResumeError:
        return ResumeError(f"the trajectory is garbled at {self._where}: {why}")

    def _field(self, record: Mapping[str, Any], key: str, kind: type[Any]) -> Any:
        value = record.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self._garbled(f"{key!r} is {value!r}, not {kind.__name__}")
        return value

    def _current(self, record: Mapping[str, Any]) -> _Turn:
        turn = self._field(record, "turn", int)
        if not self._turns or self._turns[-1].number != turn:
            raise self._garbled(f"turn {turn} has no recorded reply")
        return self._turns[-1]

    def _take_meta(self, record: Mapping[str, Any]) -> None:
        if self._meta is not None:
            raise self._garbled("a second meta record")
        version = record.get("format")
        if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
            raise ResumeError(
                f"unknown trajectory format {version!r} (this version reads 1 to {FORMAT_VERSION})"
            )
        for key in ("task_id", "model"):
            self._field(record, key, str)
        self._field(record, "max_turns", int)
        paths = self._field(record, "paths", Mapping)
        try:
            self._paths = RecordedPaths(
                **{f.name: str(paths[f.name]) for f in dataclasses.fields(RecordedPaths)}
            )
        except KeyError as exc:
            raise self._garbled(f"the paths lack {exc}") from None
        self._meta = record

    def _take_message(self, record: Mapping[str, Any]) -> None:
        role = self._field(record, "role", str)
        turn = self._field(record, "turn", int)
        content = record.get("content") or ""
        if not isinstance(content, str):
            raise self._garbled("the content is not text")
        if role == "system" and turn == 0 and self._system is None:
            self._system = content
        elif role == "user" and turn == 0 and self._system is not None and self._user is None:
            self._user = content
        elif role == "assistant" and self._user is not None:
            self._take_reply(record, turn, content)
        elif role == "user" and turn > 0:
            current = self._current(record)
            if current.calls or current.nudge is not None:
                raise self._garbled(f"a nudge in turn {turn}, whose reply called tools")
            current.nudge = content
        else:
            raise self._garbled(f"an unexpected {role} message in turn {turn}")

    def _take_reply(self, record: Mapping[str, Any], turn: int, text: str) -> None:
        expected = self._turns[-1].number + 1 if self._turns else 1
        if turn != expected:
            raise self._garbled(f"turn {turn} follows turn {expected - 1}")
        if self._turns:
            self._check_closed(self._turns[-1])
        listed = record.get("tool_calls")
        calls: list[ToolCall] = []
        if listed is not None:
            if not isinstance(listed, list):
                raise self._garbled("tool_calls is not a list")
            for entry in listed:
                if not isinstance(entry, Mapping):
                    raise self._garbled("a tool call is not an object")
                calls.append(self._tool_call(entry))
        self._turns.append(_Turn(turn, text, calls, declared=listed is not None))

    def _check_closed(self, previous: _Turn) -> None:
        if previous.submitted:
            raise self._garbled("records go on after submit")
        missing = [c.call_id for c in previous.calls if c.call_id not in previous.outputs]
        if missing:
            raise self._garbled(f"turn {previous.number} has calls without observations {missing}")
        if not previous.calls and previous.nudge is None:
            raise self._garbled(f"turn {previous.number} called no tool and got no nudge")

    def _tool_call(self, record: Mapping[str, Any]) -> ToolCall:
        return ToolCall(
            self._field(record, "call_id", str),
            self._field(record, "name", str),
            self._field(record, "arguments", str),
        )

    def _take_tool_call(self, record: Mapping[str, Any]) -> None:
        current = self._current(record)
        call = self._tool_call(record)
        if current.submitted:
            raise self._garbled("records go on after submit")
        if call.call_id in current.started:
            raise self._garbled(f"call {call.call_id} started twice")
        if current.declared:
            if current.call(call.call_id) != call:
                raise self._garbled(f"call {call.call_id} is not one the reply made")
        elif current.call(call.call_id) is None:
            current.calls.append(call)
        current.started.add(call.call_id)

    def _take_observation(self, record: Mapping[str, Any]) -> None:
        current = self._current(record)
        call_id = self._field(record, "call_id", str)
        if current.call(call_id) is None:
            raise self._garbled(f"an observation for call {call_id}, not made in this turn")
        if call_id in current.outputs:
            raise self._garbled(f"a second observation for call {call_id}")
        current.outputs[call_id] = self._field(record, "output", str)
        duration = record.get("duration_s")
        if isinstance(duration, int | float):
            current.tool_s += float(duration)

    def _take_usage(self, record: Mapping[str, Any]) -> None:
        current = self._current(record)
        current.usage += Usage(
            self._field(record, "prompt_tokens", int), self._field(record, "completion_tokens", int)
        )
        model_s = record.get("model_s")
        if isinstance(model_s, int | float):
            current.model_s += float(model_s)

    def _take_notice(self, record: Mapping[str, Any]) -> None:
        event = record.get("event")
        if event == "max_tokens_reduced":
            self._max_tokens = self._field(record, "new", int)
        elif event == "context_shortened":
            clipped = self._field(record, "clipped", list)
            for entry in clipped:
                if not isinstance(entry, Mapping):
                    raise self._garbled("a clipped observation is not an object")
                self._clipped.add(
                    (self._field(entry, "turn", int), self._field(entry, "call_id", str))
                )

    def _state(self) -> ResumeState:
        meta, paths = self._meta, self._paths
        assert meta is not None and paths is not None  # the first record is the meta record
        if self._system is not None and self._user is None:
            raise ResumeError("the trajectory ends between the system and the user prompt")
        lost: list[ToolCall] = []
        synthesized: list[dict[str, Any]] = []
        entries: list[TranscriptEntry] = []
        if self._user is not None and self._system is not None:
            entries.append(TranscriptEntry("system", self._system, 0))
            entries.append(TranscriptEntry("user", self._user, 0))
        for turn in self._turns:
            entries.append(TranscriptEntry("assistant", turn.text, turn.number, tuple(turn.calls)))
            entries.extend(
                self._observation_entry(turn, call)
                for call in turn.calls
                if call.call_id in turn.outputs
            )
            if turn.nudge is not None:
                entries.append(TranscriptEntry("user", turn.nudge, turn.number))
        last = self._turns[-1] if self._turns else None
        if last is not None and not last.submitted:
            lost, synthesized = self._close_interrupted(last, meta, paths, entries)
        usage = sum((t.usage for t in self._turns), Usage())
        return ResumeState(
            task_id=str(meta["task_id"]),
            model=str(meta["model"]),
            meta=meta,
            transcript=tuple(entries),
            turns=len(self._turns),
            usage=usage,
            model_time_s=sum(t.model_s for t in self._turns),
            tool_time_s=sum(t.tool_s for t in self._turns),
            turn_timings=tuple(TurnTiming(t.number, t.model_s, t.tool_s, 0.0) for t in self._turns),
            last_text=next((t.text for t in reversed(self._turns) if t.text), None),
            max_tokens=self._max_tokens,
            submitted=last is not None and last.submitted,
            lost_calls=tuple(lost),
            synthesized=tuple(synthesized),
            started_at=_timestamp(meta.get("started_at")),
            nudges=_trailing_text_only_turns(self._turns),
        )

    def _observation_entry(self, turn: _Turn, call: ToolCall) -> TranscriptEntry:
        """The observation as the model last saw it: clipped again if a notice says so."""
        text = turn.outputs[call.call_id]
        if (turn.number, call.call_id) in self._clipped:
            shorter = clip_observation(text)
            if shorter is not None:
                return TranscriptEntry("tool", shorter, turn.number, call=call, clipped=True)
        return TranscriptEntry("tool", text, turn.number, call=call)

    @staticmethod
    def _close_interrupted(
        turn: _Turn, meta: Mapping[str, Any], paths: RecordedPaths, entries: list[TranscriptEntry]
    ) -> tuple[list[ToolCall], list[dict[str, Any]]]:
        """Made-up observations for the calls of the last turn that have none (or the nudge a
        reply without calls would have got), as entries and as records; returns the calls."""
        notice = remaining_turns_notice(
            int(meta["max_turns"]) - turn.number,
            notice_turns=int(meta.get("remaining_turns_notice") or 0),
            paths=paths,
        )
        if not turn.calls:
            if turn.nudge is None:
                nudge = no_tool_call_nudge(paths) + notice
                entries.append(TranscriptEntry("user", nudge, turn.number))
                record = {"kind": "message", "turn": turn.number, "role": "user", "content": nudge}
                return [], [record]
            return [], []
        lost = [c for c in turn.calls if c.call_id not in turn.outputs]
        records: list[dict[str, Any]] = []
        for call in lost:
            started = call.call_id in turn.started
            output = LOST_RESULT_OBSERVATION if started else NOT_RUN_OBSERVATION
            if call is turn.calls[-1]:
                output += notice
            entries.append(TranscriptEntry("tool", output, turn.number, call=call))
            records.append(
                {
                    "kind": "observation",
                    "turn": turn.number,
                    "call_id": call.call_id,
                    "name": call.name,
                    "output": output,
                    "duration_s": 0.0,
                    "lost": True,
                }
            )
        return lost, records


def _trailing_text_only_turns(turns: Sequence[_Turn]) -> int:
    count = 0
    for turn in reversed(turns):
        if turn.calls:
            break
        count += 1
    return count


def _timestamp(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)
