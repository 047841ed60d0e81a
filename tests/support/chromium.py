"""Pages opened in a real browser: Debian's headless Chromium, one process per page.

`open_page` loads a file from disk, dumps the DOM after load, takes a screenshot and
collects the console messages Chromium logs to stderr (`--enable-logging=stderr`: each
console call is an `INFO:CONSOLE` line). No DevTools protocol: one subprocess, robust on a
loaded machine. Without Chromium the tests skip with the reason, unless
SANDFLEET_REQUIRE_BROWSER=1 (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import dataclasses
import html.parser
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOAD_TIMEOUT_S = 120.0
"""Generous: a page loads in about a second, but the machine may be shared and loaded."""
WINDOW = "1280,1800"


def chromium_or_skip() -> str:
    """The Chromium binary, else skip (or fail when SANDFLEET_REQUIRE_BROWSER=1)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    reason = "headless Chromium is not installed (apt-get install chromium)"
    if os.environ.get("SANDFLEET_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser required (SANDFLEET_REQUIRE_BROWSER=1) but {reason}", pytrace=False)
    pytest.skip(reason)


def artifacts_dir(name: str) -> Path:
    """Where a test keeps its screenshots: $SANDFLEET_TEST_ARTIFACTS/<name>, by default
    .test-artifacts/<name> in the checkout (CI keeps the folder)."""
    base = Path(os.environ.get("SANDFLEET_TEST_ARTIFACTS") or ROOT / ".test-artifacts")
    folder = base / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclasses.dataclass(frozen=True)
class Element:
    tag: str
    attributes: dict[str, str]


@dataclasses.dataclass(frozen=True)
class LoadedPage:
    dom: str
    console: list[str]
    """Console messages (errors, warnings, logs) the page produced while loading."""
    screenshot: Path

    def elements(self, tag: str, **attributes: str) -> list[Element]:
        """Elements of the dumped DOM with this tag and these attribute values (class_=...)."""
        wanted = {key.rstrip("_"): value for key, value in attributes.items()}
        return [
            element
            for element in _elements(self.dom)
            if element.tag == tag and all(element.attributes.get(k) == v for k, v in wanted.items())
        ]


class _Collector(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append(Element(tag, {key: value or "" for key, value in attrs}))


def _elements(dom: str) -> Iterator[Element]:
    collector = _Collector()
    collector.feed(dom)
    collector.close()
    return iter(collector.found)


def open_page(browser: str, page: Path, screenshot: Path, profile: Path) -> LoadedPage:
    """Load `page` from disk in headless Chromium: the DOM after load, console, screenshot."""
    command = [
        browser, "--headless", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
        "--enable-logging=stderr", "--v=0", f"--window-size={WINDOW}",
        f"--screenshot={screenshot}", "--dump-dom", page.resolve().as_uri(),
    ]  # fmt: skip
    if os.geteuid() == 0:
        command.insert(1, "--no-sandbox")  # Chromium refuses root without it
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its helper processes die with it on a timeout
    )
    try:
        dom, log = process.communicate(timeout=LOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    assert process.returncode == 0, f"chromium exited {process.returncode}:\n{log[-3000:]}"
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    return LoadedPage(dom, console, screenshot)
