"""results.json (the seed's keys plus ours) and report.md, from every recorded sample."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sandfleet.eval.records import MODES, SampleRecord
from sandfleet.eval.scoring import Summary, by_domain, summarize

RESULTS_FILE = "results.json"
REPORT_FILE = "report.md"
SAMPLES_FILE = "samples.jsonl"
RUNS_FOLDER = "runs"
"""<out>/runs/<mode>/<sample folder>/: trajectory.jsonl, result.json, output/."""


def summaries(records: Sequence[SampleRecord]) -> dict[str, dict[str, Summary]]:
    """mode -> {"all": ..., <domain>: ...} for the modes that have samples."""
    result: dict[str, dict[str, Summary]] = {}
    for mode in MODES:
        group = [record for record in records if record.mode == mode]
        if group:
            domains = by_domain(group)
            # One domain is the same as "all": no second, identical row.
            result[mode] = {"all": summarize(group), **(domains if len(domains) > 1 else {})}
    return result


def results_document(
    records: Sequence[SampleRecord], *, mode: str, elapsed_s: float, config: Mapping[str, Any]
) -> dict[str, Any]:
    """The seed's keys for `mode` (mean_score, total, num_errors, elapsed_time_seconds,
    config), then per-mode, per-domain summaries of everything in --out."""
    table = summaries(records)
    current = table.get(mode, {}).get("all") or summarize([])
    document: dict[str, Any] = {
        "mean_score": round(current.mean_score, 6),
        "total": current.samples,
        "num_errors": current.num_errors,
        "elapsed_time_seconds": round(elapsed_s, 3),
        "config": dict(config),
        "mode": mode,
        "problems": current.problems,
        "pass_at_k": {f"pass@{k}": round(v, 6) for k, v in current.pass_at.items()},
        "modes": {
            name: {key: summary.to_record() for key, summary in groups.items()}
            for name, groups in table.items()
        },
    }
    return document


def write_results(out: Path, document: Mapping[str, Any]) -> None:
    """results.json, atomically (blocking)."""
    temporary = out / (RESULTS_FILE + ".tmp")
    temporary.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", "utf-8")
    os.replace(temporary, out / RESULTS_FILE)


def _number(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _pass(summary: Summary) -> str:
    return " / ".join(f"{summary.pass_at[k]:.3f}" for k in sorted(summary.pass_at))


_COLUMNS = (
    "domain", "problems", "samples", "mean score", "pass@1 / pass@k", "errors (run / reward)",
    "wrong", "prompt tok", "completion tok", "turns", "env token share", "model s", "env s",
    "total s",
)  # fmt: skip


def _row(name: str, s: Summary) -> list[str]:
    return [
        name, str(s.problems), str(s.samples), f"{s.mean_score:.3f}", _pass(s),
        f"{s.num_errors} ({s.run_errors} / {s.reward_errors})", str(s.wrong),
        _number(s.prompt_tokens, 0), _number(s.completion_tokens, 0), _number(s.turns),
        _share(s.observation_token_share), _number(s.model_time_s, 2),
        _number(s.env_time_s, 2), _number(s.total_time_s, 2),
    ]  # fmt: skip


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _ratio(sandbox: float | None, llm: float | None) -> str:
    if sandbox is None or llm is None or llm == 0:
        return "n/a"
    return f"{sandbox / llm:.2f}x"


def _comparison(sandbox: Summary, llm: Summary) -> list[str]:
    pairs: list[tuple[str, float | None, float | None]] = [
        ("mean score", sandbox.mean_score, llm.mean_score),
        ("prompt tokens / sample", sandbox.prompt_tokens, llm.prompt_tokens),
        ("completion tokens / sample", sandbox.completion_tokens, llm.completion_tokens),
        ("wall time / sample (s)", sandbox.total_time_s, llm.total_time_s),
        ("model time / sample (s)", sandbox.model_time_s, llm.model_time_s),
    ]
    rows = [[name, _number(a, 3), _number(b, 3), _ratio(a, b)] for name, a, b in pairs]
    return _table(["", "sandbox", "llm", "sandbox / llm"], rows)


def report_markdown(
    records: Sequence[SampleRecord], *, config: Mapping[str, Any], missing: int = 0
) -> str:
    """A short report: one table per mode (all, then each domain), side by side if both ran,
    how the samples stopped, and each sample's answer. `missing`: samples the run that
    writes the report planned but has no result for (interrupted), said at the top."""
    table = summaries(records)
    lines = [f"# sandfleet eval: {config.get('benchmark', '?')}", ""]
    if missing:
        lines += [
            f"**Partial run:** {missing} planned sample(s) have no result (the run was "
            "interrupted or stopped); the numbers below cover only the samples that finished. "
            "Run the same command again to finish.",
            "",
        ]
    lines.append(
        f"model `{config.get('model')}` at {config.get('base_url') or 'OpenAI'}; "
        f"{config.get('samples')} sample(s) per problem; data {config.get('data')}"
    )
    lines.append("")
    lines.append(
        "Tokens and times are means per sample. The environment's token share is the part of "
        "the final context that observations and nudges added (from the endpoint's own "
        "counts); env s is time spent running tool calls; total s includes sandbox start "
        "and the reward. Errors (the run or the reward failed) score 0 and are counted "
        "apart from wrong answers."
    )
    for mode, groups in table.items():
        lines += ["", f"## {mode} mode", ""]
        rows = [_row(name, summary) for name, summary in groups.items()]
        lines += _table(_COLUMNS, rows)
    if "sandbox" in table and "llm" in table:
        lines += ["", "## sandbox vs llm", ""]
        lines += _comparison(table["sandbox"]["all"], table["llm"]["all"])
    lines += _stop_reasons(records)
    lines += _answers(records)
    errors = [r for r in records if r.is_error]
    if errors:
        lines += ["", "## errors", ""]
        for record in errors[:50]:
            first = (record.error or "").strip().splitlines()[0][:200]
            lines.append(f"- {record.mode} `{record.problem_id}` sample {record.sample}: {first}")
        if len(errors) > 50:
            lines.append(f"- ... and {len(errors) - 50} more (samples.jsonl)")
    return "\n".join(lines) + "\n"


def _stop_reasons(records: Sequence[SampleRecord]) -> list[str]:
    """Samples per mode and status: the stop reason, submits without an answer apart."""
    counts: dict[tuple[str, str], int] = {}
    for record in records:
        key = (record.mode, record.status)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return []
    rows = [[mode, f"`{status}`", str(n)] for (mode, status), n in sorted(counts.items())]
    return ["", "## how samples stopped", "", *_table(["mode", "status", "samples"], rows)]


_ANSWER_CHARS = 80
_ANSWERS_SHOWN = 200


def _cell(value: Any) -> str:
    """A value as one table cell: one line, pipes escaped, long text cut."""
    text = " ".join(str(value).split()).replace("|", "\\|")
    return text if len(text) <= _ANSWER_CHARS else text[: _ANSWER_CHARS - 1] + "…"


def _answers(records: Sequence[SampleRecord]) -> list[str]:
    """Each sample's answer next to the expected one (the first _ANSWERS_SHOWN)."""
    if not records:
        return []
    ordered = sorted(records, key=lambda r: (r.mode, r.problem_id, r.sample))
    rows = [
        [
            r.mode, f"`{_cell(r.problem_id)}`", str(r.sample), f"`{r.status}`", f"{r.score:g}",
            _cell(r.agent_answer) if r.agent_answer.strip() else "(none)",
            _cell(r.ground_truth),
        ]
        for r in ordered[:_ANSWERS_SHOWN]
    ]  # fmt: skip
    header = ["mode", "problem", "sample", "status", "score", "answer", "expected"]
    lines = ["", "## answers", "", *_table(header, rows)]
    if len(ordered) > _ANSWERS_SHOWN:
        lines.append(f"- ... and {len(ordered) - _ANSWERS_SHOWN} more (samples.jsonl)")
    return lines


def write_report(out: Path, text: str) -> None:
    (out / REPORT_FILE).write_text(text, encoding="utf-8")
