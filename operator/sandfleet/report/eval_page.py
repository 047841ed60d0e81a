"""report.html of `sandfleet eval`: the report.md's numbers as plots and linked tables.

Pure: callers pass the records, the summaries and where each sample's run page is; the CLI
writes the file (and the run pages) beside report.md.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sandfleet.eval.records import SampleRecord
from sandfleet.eval.scoring import Summary
from sandfleet.report import plots
from sandfleet.report.html import render

MAX_PROBLEMS_PLOTTED = 40
"""Problems in the per-problem plots (the most tokens or time first); the table has all."""


@dataclasses.dataclass(frozen=True, slots=True)
class Plot:
    title: str
    svg: str


@dataclasses.dataclass(frozen=True, slots=True)
class SampleRow:
    record: SampleRecord
    href: str | None
    """The sample's run page, relative to report.html (None: no trajectory here)."""


def _score_by_domain(table: Mapping[str, Mapping[str, Summary]]) -> Plot:
    domains = list(dict.fromkeys(name for groups in table.values() for name in groups))
    series = {
        mode: [groups[d].mean_score if d in groups else 0.0 for d in domains]
        for mode, groups in table.items()
    }
    title = "Mean score by domain" + (": sandbox vs llm" if len(table) > 1 else "")
    return Plot(
        title,
        plots.grouped_bars(title, domains, series, ylabel="mean score", colours=plots.MODE_COLOURS),
    )


def _per_problem(
    records: Sequence[SampleRecord], value: Callable[[SampleRecord], float]
) -> dict[str, float]:
    """Mean of `value` per problem over its samples."""
    groups: dict[str, list[float]] = collections.defaultdict(list)
    for record in records:
        groups[record.problem_id].append(value(record))
    return {problem: sum(v) / len(v) for problem, v in groups.items()}


def _busiest(totals: Mapping[str, float]) -> list[str]:
    return sorted(totals, key=lambda problem: -totals[problem])[:MAX_PROBLEMS_PLOTTED]


def _tokens(mode: str, records: Sequence[SampleRecord]) -> Plot:
    prompt = _per_problem(records, lambda r: float(r.prompt_tokens))
    completion = _per_problem(records, lambda r: float(r.completion_tokens))
    environment = _per_problem(records, lambda r: float(r.observation_tokens or 0))
    problems = _busiest({p: prompt[p] + completion[p] for p in prompt})
    series = {
        "prompt (billed, all turns)": [prompt[p] for p in problems],
        "completion": [completion[p] for p in problems],
        "environment's share of the final context": [environment[p] for p in problems],
    }
    title = f"Tokens per problem ({mode} mode, mean per sample)"
    return Plot(title, plots.grouped_bars(title, problems, series, ylabel="tokens"))


def _times(mode: str, records: Sequence[SampleRecord]) -> Plot | None:
    if any(r.model_time_s is None or r.env_time_s is None for r in records):
        return None  # the kubernetes backend does not split the time
    model = _per_problem(records, lambda r: r.model_time_s or 0.0)
    tools = _per_problem(records, lambda r: r.env_time_s or 0.0)
    total = _per_problem(records, lambda r: r.total_time_s)
    problems = _busiest(total)
    series = {
        "model": [model[p] for p in problems],
        "tools": [tools[p] for p in problems],
        "other (sandbox start, copy-back, reward)": [
            max(0.0, total[p] - model[p] - tools[p]) for p in problems
        ],
    }
    title = f"Time per problem ({mode} mode, mean per sample)"
    return Plot(title, plots.grouped_bars(title, problems, series, ylabel="seconds", stacked=True))


def _pass_at_k(table: Mapping[str, Mapping[str, Summary]]) -> Plot | None:
    ks = sorted({k for groups in table.values() for k in groups["all"].pass_at})
    if len(ks) < 2:
        return None
    series = {
        mode: [groups["all"].pass_at.get(k, 0.0) for k in ks] for mode, groups in table.items()
    }
    return Plot("pass@k", plots.lines("pass@k", ks, series, ylabel="pass@k"))


def eval_plots(
    records: Sequence[SampleRecord], table: Mapping[str, Mapping[str, Summary]]
) -> list[Plot]:
    """Every plot the data allows (none without matplotlib or samples)."""
    if not records or not table or not plots.available():
        return []
    found: list[Plot | None] = [_score_by_domain(table)]
    for mode in table:
        mine = [r for r in records if r.mode == mode]
        if mode == "sandbox":
            found.append(_tokens(mode, mine))
            found.append(_times(mode, mine))
    found.append(_pass_at_k(table))
    return [plot for plot in found if plot is not None]


def eval_page(
    records: Sequence[SampleRecord],
    table: Mapping[str, Mapping[str, Summary]],
    *,
    config: Mapping[str, Any],
    links: Mapping[tuple[str, str, int], str],
    missing: int = 0,
) -> str:
    """The report page; `links`: (mode, problem, sample) -> its run page, relative."""
    ordered = sorted(records, key=lambda r: (r.mode, r.problem_id, r.sample))
    rows = [SampleRow(r, links.get(r.key)) for r in ordered]
    return render(
        "eval.html.j2",
        config=config,
        table=table,
        plots=eval_plots(records, table),
        plots_available=plots.available(),
        rows=rows,
        missing=missing,
    )
