"""A run's folder: <results-dir>/<run-id>/ with result.json, trajectory.jsonl and output/.

The run id is the task's folder-safe name and the UTC start time; a new run never reuses an
earlier run's folder.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from pathlib import Path

RESULT_FILE = "result.json"
TRAJECTORY_FILE = "trajectory.jsonl"
OUTPUT_FOLDER = "output"


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def task_folder_name(task_id: str) -> str:
    """A folder name for a task id; ids that are not already safe get a hash suffix so two
    different ids never share a folder."""
    safe = _UNSAFE.sub("_", task_id).strip("._")[:80]
    if safe == task_id:
        return safe
    digest = hashlib.sha256(task_id.encode()).hexdigest()[:8]
    return f"{safe or 'task'}-{digest}"


_RUN_TIME_FORMAT = "%Y%m%dT%H%M%SZ"


def run_id(task_id: str, started: datetime.datetime, attempt: int = 0) -> str:
    """A run's id and folder name: the task's folder name, the UTC start time to the second,
    and from the second attempt on a counter (two runs of one task in one second)."""
    stamp = started.astimezone(datetime.UTC).strftime(_RUN_TIME_FORMAT)
    base = f"{task_folder_name(task_id)}-{stamp}"
    return base if attempt == 0 else f"{base}-{attempt + 1}"


PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
PRIVATE_UMASK = 0o077
"""The umask the CLI (and any long-running caller) sets: a run's prompt, trajectory and
outputs are the user's alone; another user, or a sandbox running as another uid, reads none
of them."""


def new_run_folder(results_dir: Path, task_id: str) -> Path:
    """Create and return a private (0700) folder no earlier run has used, so a rerun never
    touches an earlier run's files (mkdir without exist_ok is the atomic claim, also across
    processes)."""
    started = datetime.datetime.now(datetime.UTC)
    if not results_dir.is_dir():
        results_dir.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    for attempt in range(1000):
        folder = results_dir / run_id(task_id, started, attempt)
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"no free run folder for {task_id!r} in {results_dir}")
