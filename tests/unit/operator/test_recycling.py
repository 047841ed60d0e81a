"""Recycling's pure parts: which pool pods may be recycled at all, and the check that the
sandbox's user can write nothing a reset does not restore."""

from __future__ import annotations

from sandfleet.fleet.resources import pool_pod, resets_every_writable_path, resolve_pod_template
from sandfleet.operator.recycling import writable_outside_the_reset
from tests.unit.fleet.test_resources import DEFAULTS, POOL


def test_only_a_recycling_pools_pods_restore_every_writable_path_on_reset() -> None:
    resolved = resolve_pod_template(None, DEFAULTS)

    plain = pool_pod(POOL, resolved, "t", DEFAULTS)
    recycling = pool_pod(POOL, resolved, "t", DEFAULTS, recycle=True)

    assert not resets_every_writable_path(plain)
    assert resets_every_writable_path(recycling)
    env = {e["name"]: e.get("value") for e in recycling["spec"]["containers"][0]["env"]}
    assert env["SANDFLEET_RUNTIME_RESET_PATHS"] == "/tmp:/var/tmp:/dev/shm:/run/lock:~"


def test_what_the_image_makes_writable_must_all_be_restored_by_the_reset() -> None:
    slim = "HOME=/home/sandbox\nPWD=/testbed\n/testbed\n/tmp\n/var/tmp\n/run/lock\n/home/sandbox\n"
    full = slim + "/opt/python\n/etc/motd\n"

    assert writable_outside_the_reset(slim) == []
    assert writable_outside_the_reset(full) == ["/opt/python", "/etc/motd"]
    # A sibling that merely starts like a restored path is not inside it; root writes "/".
    assert writable_outside_the_reset("HOME=/root\nPWD=/w\n/tmpfoo\n/") == ["/tmpfoo", "/"]
    # Without HOME or the working directory, only the fixed paths count as restored.
    assert writable_outside_the_reset("/home/sandbox\n") == ["/home/sandbox"]
