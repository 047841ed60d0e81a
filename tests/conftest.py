"""Two lanes for `pytest -n 2`: the cluster's tests in one worker, everything else in the other.

Each lane runs its tests one after the other, as a plain `pytest` would; the lanes run side
by side. Two lanes, not free distribution: several host tests assert that no sandbox,
process or cgroup of theirs is left behind, which another worker's live sandboxes would
break. The cluster lane spends most of its time waiting on the API server and containerd,
so the unit tests that start no sandbox (all of tests/unit but packaging, whose install test
runs a task) ride in it and use that idle time; the host lane keeps the integration, model,
browser and packaging tests. Without `-n` the groups are inert.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CLUSTER_TESTS = Path(__file__).parent / "cluster"
UNIT_TESTS = Path(__file__).parent / "unit"
UNIT_TESTS_THAT_START_SANDBOXES = UNIT_TESTS / "packaging"
CLUSTER_LANE = "cluster"
HOST_LANE = "host"


def pytest_itemcollected(item: pytest.Item) -> None:
    """Each test's lane, marked as it is collected (before xdist reads the groups)."""
    on_cluster = item.get_closest_marker("cluster") or item.path.is_relative_to(CLUSTER_TESTS)
    starts_nothing = item.path.is_relative_to(UNIT_TESTS) and not item.path.is_relative_to(
        UNIT_TESTS_THAT_START_SANDBOXES
    )
    lane = CLUSTER_LANE if on_cluster or starts_nothing else HOST_LANE
    item.add_marker(pytest.mark.xdist_group(lane))
