"""The README's `pytest -n 2` keeps the cluster's tests (and the unit tests that start no
sandbox) in one worker and the rest in the other (tests/conftest.py): two workers each
starting the one test cluster would collide, and the host tests that count their leftovers
must not see another worker's sandboxes. Checked on a throwaway tree with the project's
conftest, in a real `pytest -n 2` run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

_RECORDING_TEST = """
import os
import pytest

@pytest.mark.parametrize("i", range(6))
def test_records_its_worker(i):
    with open({out!r}, "a") as f:
        f.write("{lane} " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_the_cluster_lane_and_the_host_lane_each_run_in_one_worker(tmp_path: Path) -> None:
    tree, out = tmp_path / "tree", tmp_path / "workers.txt"
    lanes = (
        ("cluster", "tests/cluster"),
        ("cluster", "tests/unit/sandbox"),
        ("host", "tests/integration"),
        ("host", "tests/unit/packaging"),
    )
    for lane, folder in lanes:
        (tree / folder).mkdir(parents=True)
        (tree / folder / f"test_{folder.replace('/', '_')}.py").write_text(
            _RECORDING_TEST.format(out=str(out), lane=lane)
        )
    shutil.copy(TESTS / "conftest.py", tree / "tests" / "conftest.py")
    (tree / "pytest.ini").write_text("[pytest]\naddopts = --dist=loadgroup\n")

    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "tests"],
        cwd=tree, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert run.returncode == 0, run.stdout + run.stderr
    workers: dict[str, set[str]] = defaultdict(set)
    for line in out.read_text().splitlines():
        lane, worker = line.split()
        workers[lane].add(worker)
    assert len(workers["cluster"]) == 1 and len(workers["host"]) == 1, dict(workers)
    assert workers["cluster"] != workers["host"]
