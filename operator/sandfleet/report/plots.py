"""The eval report's plots: matplotlib figures drawn to inline SVG (no file, no network).

matplotlib is the `report` extra; `available()` says whether it is installed, and the page
says how to get the plots when it is not. Figures are small and few (four at most), so the
report stays a few hundred kilobytes even for large benchmarks.
"""

from __future__ import annotations

import importlib.util
import io
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MODE_COLOURS: Mapping[str, str] = {"sandbox": "#2f5fb3", "llm": "#d08c2a"}
PART_COLOURS = ("#2f5fb3", "#7fa7e6", "#d08c2a")
_STYLE: dict[Any, Any] = {
    "svg.fonttype": "none",  # text stays text: smaller, searchable, selectable
    "svg.hashsalt": "sandfleet",  # stable element ids, so two writes of one report match
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_NO_METADATA: dict[str, Any] = {"Date": None, "Creator": None, "Format": None, "Type": None}
_XML_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.S)


def available() -> bool:
    """Whether matplotlib (the `report` extra) is installed."""
    return importlib.util.find_spec("matplotlib") is not None


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _svg(figure: Figure) -> str:
    """The figure as an <svg> element to inline in HTML (the XML prologue dropped)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context(_STYLE):
        # No <metadata> (date, creator): the report holds data, not provenance of a drawing.
        figure.savefig(buffer, format="svg", metadata=_NO_METADATA)
    return _XML_PROLOGUE.sub("", buffer.getvalue(), count=1)


def grouped_bars(
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    ylabel: str,
    colours: Mapping[str, str] | None = None,
    stacked: bool = False,
) -> str:
    """Bars per group, one per series side by side (or stacked), as SVG."""
    with _style():
        figure = _figure(max(4.5, 0.45 * len(groups) * max(1, len(series)) + 1.5), 3.2)
        axes = figure.subplots()
        count = len(series)
        width = 0.8 if stacked else 0.8 / max(count, 1)
        bottoms = [0.0] * len(groups)
        for index, (name, values) in enumerate(series.items()):
            colour = (colours or {}).get(name, PART_COLOURS[index % len(PART_COLOURS)])
            offsets = [
                i if stacked else i - 0.4 + width * (index + 0.5) for i in range(len(groups))
            ]
            axes.bar(offsets, values, width, label=name, color=colour, bottom=bottoms)
            if stacked:
                bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
        axes.set_xticks(range(len(groups)), [_short(g) for g in groups])
        if len(groups) > 6:
            axes.tick_params(axis="x", labelrotation=60)
        axes.set_ylabel(ylabel)
        axes.set_title(title)
        axes.legend(frameon=False, fontsize=8)
        return _svg(figure)


def lines(
    title: str, xs: Sequence[int], series: Mapping[str, Sequence[float]], *, ylabel: str
) -> str:
    """One line per series over integer x values (pass@k over k), as SVG."""
    with _style():
        figure = _figure(4.5, 3.2)
        axes = figure.subplots()
        for name, values in series.items():
            axes.plot(xs, values, marker="o", label=name, color=MODE_COLOURS.get(name))
        axes.set_xticks(list(xs))
        axes.set_xlabel("k")
        axes.set_ylabel(ylabel)
        axes.set_ylim(0, 1.02)
        axes.set_title(title)
        axes.legend(frameon=False, fontsize=8)
        return _svg(figure)


def _style() -> Any:
    import matplotlib

    return matplotlib.rc_context(_STYLE)


def _short(label: str, limit: int = 18) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"
