"""One scored sample (a line of samples.jsonl) and the append-only log a rerun resumes from."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from sandfleet.agent.results import SUBMITTED_NO_ANSWER, StopReason
from sandfleet.errors import SandfleetError
from sandfleet.json_lines import JsonLinesLog

Mode = Literal["sandbox", "llm"]
MODES: tuple[Mode, ...] = ("sandbox", "llm")


class RecordsError(SandfleetError):
    """samples.jsonl holds a line that is not a sample record (not a torn last line)."""


@dataclasses.dataclass(frozen=True, slots=True)
class SampleRecord:
    """What one (problem, sample) came to in one mode."""

    mode: str
    problem_id: str
    sample: int
    domain: str
    score: float
    correct: bool
    """score reached 1 (what pass@k counts)."""
    error: str | None
    """Why the sample is an error rather than a wrong answer: the run failed (stop reason)
    or the reward did; None for a scored sample, right or wrong."""
    error_kind: str | None
    """"run" or "reward" (None when error is None)."""
    agent_answer: str
    """What compute_score got: the answer file's stripped text ("" when missing) in sandbox
    mode, the reply text in llm mode."""
    ground_truth: Any
    stop_reason: str
    turns: int = 0
    prompt_tokens: int = 0
    """Summed over every model call of the sample (what the endpoint billed)."""
    completion_tokens: int = 0
    context_tokens: int | None = None
    """Tokens of the final trajectory: the last call's prompt plus its completion."""
    observation_tokens: int | None = None
    """Of those, tokens the environment added (observations, nudges), from the endpoint's
    own counts: how much each prompt grew beyond the previous prompt and completion."""
    model_time_s: float | None = None
    """Waiting for the model (None where unknown: the kubernetes backend)."""
    env_time_s: float | None = None
    """Running tool calls in the sandbox (None where unknown: the kubernetes backend)."""
    total_time_s: float = 0.0
    """Everything: sandbox start, the loop (or the one request), copying back, the reward."""
    trajectory: str | None = None
    session: str | None = None
    """namespace/name of the SandboxSession (kubernetes backend)."""
    finished_at: str = ""

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.mode, self.problem_id, self.sample)

    @property
    def is_error(self) -> bool:
        return self.error is not None

    @property
    def status(self) -> str:
        """The stop reason, or submitted_no_answer for a submit with an empty answer."""
        if self.stop_reason == StopReason.SUBMITTED and not self.agent_answer.strip():
            return SUBMITTED_NO_ANSWER
        return self.stop_reason

    def to_record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SampleRecord:
        known = {field.name for field in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in record.items() if key in known})


class SampleLog(JsonLinesLog[SampleRecord]):
    """--out/samples.jsonl: one line per finished sample, appended and fsynced as each
    finishes, so an interrupted run loses only the samples still running."""

    what = "a sample record"
    error = RecordsError

    def parse(self, record: Any) -> SampleRecord:
        return SampleRecord.from_record(record)

    def record(self, item: SampleRecord) -> dict[str, Any]:
        return item.to_record()


def latest(records: Iterable[SampleRecord]) -> dict[tuple[str, str, int], SampleRecord]:
    """The last record per (mode, problem, sample): a retried sample appends a newer one."""
    return {record.key: record for record in records}
