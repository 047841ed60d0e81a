"""Persistent bash sessions against real bash: state, output, timeouts, limits, cleanup."""

from __future__ import annotations

import asyncio
import os
import random
import resource
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandfleet_runtime.bash.limits import SessionLimits
from sandfleet_runtime.bash.processes import ChildReaper, process_table
from sandfleet_runtime.bash.sessions import BashSessions, Outcome, OutputStream
from sandfleet_runtime.errors import InvalidArgumentError, ResourceExhaustedError

pytestmark = pytest.mark.integration

SessionsFactory = Callable[..., BashSessions]


def _token() -> str:
    """A `sleep` argument no other process on this shared machine uses: 30.<random digits>."""
    return f"30.{random.randrange(10**8, 10**9)}"


def _pids_running(fragment: str) -> list[int]:
    """Live processes whose command line contains `fragment`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                arguments = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/stat", "rb") as stat:
                state = stat.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if fragment in arguments and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def _zombie_children() -> list[int]:
    zombies = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == b"Z" and int(fields[1]) == os.getpid():
                zombies.append(int(name))
    return zombies


async def _eventually(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def test_cwd_variables_functions_and_aliases_persist_between_calls(
    sessions: BashSessions, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    setup = "cd sub && export GREETING=hi && shout() { echo \"$1!\"; } && alias ll='echo aliased'"
    first = await sessions.run("", setup)
    assert first.exit_code == 0
    assert first.cwd == str(tmp_path / "sub")

    result = await sessions.run("", 'echo "$PWD $GREETING"; shout hey; ll')

    assert result.stdout == f"{tmp_path / 'sub'} hi\nhey!\naliased\n"
    assert result.outcome is Outcome.EXITED


async def test_the_previous_exit_status_is_visible_as_dollar_question_mark(
    sessions: BashSessions,
) -> None:
    await sessions.run("", "false")
    assert (await sessions.run("", "echo $?")).stdout == "1\n"


async def test_exit_code_and_stderr_are_reported_separately(sessions: BashSessions) -> None:
    result = await sessions.run(
        "", "echo out; echo err >&2; exit_with() { return $1; }; exit_with 7"
    )
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 7)
    assert (result.stdout_total_bytes, result.stderr_total_bytes) == (4, 4)


async def test_errors_read_like_bash_c_output(sessions: BashSessions) -> None:
    result = await sessions.run("", "true\nnosuchcommand_sf")
    assert result.stderr == "bash: line 2: nosuchcommand_sf: command not found\n"
    assert result.exit_code == 127
    in_function = await sessions.run("", "f() { nosuchcommand_sf; }; f")
    assert in_function.stderr == "bash: line 1: nosuchcommand_sf: command not found\n"


async def test_an_unbalanced_quote_is_a_quick_syntax_error_not_a_hang(
    sessions: BashSessions,
) -> None:
    result = await sessions.run("", 'echo "abc', timeout_s=5)
    assert result.outcome is Outcome.EXITED
    assert result.exit_code == 2
    assert "unexpected EOF while looking for matching" in result.stderr
    assert (await sessions.run("", "cat <<EOF\nno end")).outcome is Outcome.EXITED
    assert (await sessions.run("", "echo fine")).stdout == "fine\n"


async def test_functions_shadowing_builtins_do_not_break_the_session(
    sessions: BashSessions,
) -> None:
    shadows = ("true", ":", "read", "printf", "eval", "cd", "trap", "set", "shopt", "continue")
    await sessions.run("", "; ".join(f"{name}() {{ echo hijacked; }}" for name in shadows))
    result = await sessions.run("", "builtin echo fine")
    assert (result.stdout, result.exit_code) == ("fine\n", 0)
    assert (await sessions.run("", "sleep 30", timeout_s=0.3)).outcome is Outcome.TIMED_OUT
    assert (await sessions.run("", "builtin echo still fine")).stdout == "still fine\n"


async def test_a_command_reading_stdin_gets_end_of_file_at_once(sessions: BashSessions) -> None:
    result = await sessions.run("", "cat; read line; echo read=$?", timeout_s=5)
    assert result.stdout == "read=1\n"  # a hang would have been TIMED_OUT


async def test_the_driver_stays_out_of_sight(sessions: BashSessions) -> None:
    command_line = "tr '\\0' ' ' < /proc/$$/cmdline; echo"
    result = await sessions.run("", f"{command_line}; env | grep -c sandfleet_boot")
    assert result.stdout.startswith("bash --noprofile --norc -c builtin eval")
    assert len(result.stdout.splitlines()[0]) < 200
    assert result.stdout.splitlines()[1] == "0"


async def test_private_pipes_are_not_inherited_by_commands(sessions: BashSessions) -> None:
    result = await sessions.run("", "ls /proc/self/fd")
    # 0-2 are the command's stdio, 3 is the directory ls itself is reading.
    assert result.stdout.split() == ["0", "1", "2", "3"]


async def test_a_background_job_does_not_hang_the_call(sessions: BashSessions) -> None:
    token = _token()
    started = time.monotonic()
    result = await sessions.run(
        "",
        f"sleep {token} & python3 -m http.server 0 --bind 127.0.0.1 & echo started",
        timeout_s=10,
    )
    assert result.stdout == "started\n"
    assert result.outcome is Outcome.EXITED
    assert time.monotonic() - started < 5
    assert await _eventually(lambda: bool(_pids_running(f"sleep {token}")))  # still running


async def test_later_output_of_a_background_job_shows_up_in_a_later_call(
    sessions: BashSessions,
) -> None:
    await sessions.run("", "(while [ ! -e go ]; do sleep 0.01; done; echo late) &")
    result = await sessions.run("", "touch go; wait; echo now")
    assert result.stdout == "late\nnow\n"


async def test_a_large_command_reaches_bash_intact(sessions: BashSessions) -> None:
    body = "".join(f"line {i:06d} {'x' * 60}\n" for i in range(5000))  # ~360 KB
    result = await sessions.run("", f"cat > big.txt <<'EOF'\n{body}EOF\nwc -c < big.txt")
    assert result.stdout.strip() == str(len(body.encode()))


async def test_timeout_kills_the_process_tree(sessions: BashSessions, tmp_path: Path) -> None:
    inner, outer = _token(), _token()
    result = await sessions.run("", f"(sleep {inner}; touch marker) & sleep {outer}", timeout_s=0.5)
    assert result.outcome is Outcome.TIMED_OUT
    assert result.exit_code is None
    assert 0.5 <= result.duration_s < 10  # the sleeps were 30 s
    # With both sleeps and their subshell gone, `touch marker` can never run.
    assert await _eventually(lambda: not _pids_running(inner) and not _pids_running(outer))
    assert not (tmp_path / "marker").exists()


async def test_the_session_keeps_its_state_after_a_timeout(sessions: BashSessions) -> None:
    await sessions.run("", "cd /; KEEP=yes")
    for command in ("sleep 30", "for i in 1 2 3; do sleep 30; done", "while :; do :; done"):
        result = await sessions.run("", command, timeout_s=0.3)
        assert result.outcome is Outcome.TIMED_OUT
        assert result.cwd == "/"
        assert "new shell" not in result.stderr
    assert (await sessions.run("", 'echo "$PWD $KEEP"')).stdout == "/ yes\n"


async def test_a_timeout_unwinds_nested_functions_without_running_the_rest(
    sessions: BashSessions,
) -> None:
    script = (
        "inner() { sleep 30; echo inner-rest; }; outer() { inner; echo outer-rest; };"
        " outer; echo top-rest"
    )
    result = await sessions.run("", script, timeout_s=0.3)
    assert result.outcome is Outcome.TIMED_OUT
    assert "rest" not in result.stdout


async def test_background_jobs_of_earlier_commands_survive_a_later_timeout(
    sessions: BashSessions,
) -> None:
    started = await sessions.run("", f"sleep {_token()} & echo $!")
    survivor = int(started.stdout)
    result = await sessions.run("", "sleep 30", timeout_s=0.3)
    assert result.outcome is Outcome.TIMED_OUT
    assert _alive(survivor)


async def test_a_shell_that_ignores_interrupts_is_replaced_and_says_so(
    sessions: BashSessions, tmp_path: Path
) -> None:
    await sessions.run("", "cd /; LOST=1")
    streamed: list[str] = []
    result = await sessions.run(
        "",
        "trap '' INT; while :; do :; done",
        timeout_s=0.3,
        listener=lambda stream, text: streamed.append(text),
    )
    assert result.outcome is Outcome.TIMED_OUT
    assert "did not respond" in result.stderr
    assert "reset" in result.stderr
    assert "".join(streamed) == result.stderr
    after = await sessions.run("", 'echo "$PWD ${LOST-unset}"')
    assert after.stdout == f"{tmp_path} unset\n"


async def test_a_shell_killed_between_commands_is_replaced_with_a_note(
    sessions: BashSessions,
) -> None:
    shell = int((await sessions.run("", "echo $$")).stdout)
    os.kill(shell, signal.SIGKILL)
    assert await _eventually(lambda: not Path(f"/proc/{shell}").exists())  # reaped
    result = await sessions.run("", "echo $$")
    assert int(result.stdout) != shell
    assert "previous shell had exited (status 137)" in result.stderr


async def test_an_interrupt_from_another_task_stops_the_command(sessions: BashSessions) -> None:
    started = asyncio.Event()

    def listener(stream: OutputStream, text: str) -> None:
        if stream is OutputStream.STDOUT and "started" in text:
            started.set()

    await sessions.run("", "KEEP=kept")
    token = _token()
    task = asyncio.create_task(
        sessions.run("", f"echo started; sleep {token}; echo never", listener=listener)
    )
    await asyncio.wait_for(started.wait(), 5)
    assert await sessions.interrupt("")
    result = await asyncio.wait_for(task, 5)

    assert result.outcome is Outcome.INTERRUPTED
    assert result.exit_code == 130
    assert result.stdout == "started\n"
    assert not _pids_running(token)
    assert (await sessions.run("", "echo $KEEP")).stdout == "kept\n"
    assert not await sessions.interrupt("")


async def test_an_interrupt_stops_a_program_that_handles_sigint(sessions: BashSessions) -> None:
    started = asyncio.Event()
    program = (
        "import signal, sys, time\n"
        'signal.signal(signal.SIGINT, lambda *_: (print("cleanup", flush=True), sys.exit(3)))\n'
        'print("ready", flush=True)\n'
        "time.sleep(30)\n"
    )
    seen: list[str] = []

    def listener(stream: OutputStream, text: str) -> None:
        seen.append(text)
        if "ready\n" in "".join(seen):  # the whole line: print() may write it in two parts
            started.set()

    task = asyncio.create_task(
        sessions.run("", f"python3 -c '{program}'; echo after", listener=listener)
    )
    await asyncio.wait_for(started.wait(), 10)
    await sessions.interrupt("")
    result = await asyncio.wait_for(task, 5)
    assert result.outcome is Outcome.INTERRUPTED
    assert result.stdout == "ready\ncleanup\n"


async def test_fifty_megabytes_of_output_are_clipped_and_counted(sessions: BashSessions) -> None:
    result = await sessions.run("", "head -c 50000000 /dev/zero | tr '\\0' 'a'")
    assert result.stdout_total_bytes == 50_000_000
    assert result.stdout_truncated
    assert result.stdout.startswith("a" * 5000 + "\n<response clipped: 49,990,000 characters")
    assert result.stdout.endswith(">\n" + "a" * 5000)


async def test_binary_output_does_not_break_decoding(sessions: BashSessions) -> None:
    result = await sessions.run(
        "", "head -c 100000 /dev/urandom; echo; echo done", max_output_chars=200_000
    )
    assert result.exit_code == 0
    assert result.stdout_total_bytes == 100_006
    assert result.stdout.endswith("\ndone\n")
    assert "\ufffd" in result.stdout


async def test_a_flood_of_output_completes_fast_with_bounded_memory(
    sessions: BashSessions,
) -> None:
    await sessions.run("", "true")
    peak_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = await sessions.run("", "yes | head -c 1G", timeout_s=60)
    peak_after_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    assert result.stdout_total_bytes == 1 << 30
    assert result.stdout_truncated
    assert len(result.stdout) < 10_500
    assert result.duration_s < 20
    assert peak_after_kib - peak_before_kib < 64 * 1024  # 1 GiB went through, < 64 MiB stayed


async def test_the_listener_never_receives_half_a_character(sessions: BashSessions) -> None:
    chunks: list[str] = []
    euro = "\\xe2\\x82\\xac"
    result = await sessions.run(
        "",
        f"printf '{euro[:8]}'; sleep 0.05; printf '{euro[8:]}x\\n'",
        listener=lambda stream, text: chunks.append(text),
    )
    assert result.stdout == "€x\n"
    assert "".join(chunks) == "€x\n"
    assert "\ufffd" not in "".join(chunks)


async def test_sessions_run_in_parallel(sessions: BashSessions) -> None:
    await asyncio.gather(sessions.run("a", "true"), sessions.run("b", "true"))
    started = time.monotonic()
    results = await asyncio.gather(sessions.run("a", "sleep 1"), sessions.run("b", "sleep 1"))
    assert [result.exit_code for result in results] == [0, 0]
    assert time.monotonic() - started < 1.8
    assert sessions.session_count == 2


async def test_calls_on_one_session_run_one_after_the_other(sessions: BashSessions) -> None:
    first = asyncio.create_task(sessions.run("", "sleep 0.3; echo one > order"))
    second = asyncio.create_task(sessions.run("", "cat order; echo two >> order"))
    assert (await second).stdout == "one\n"
    assert (await first).exit_code == 0
    assert (await sessions.run("", "cat order")).stdout == "one\ntwo\n"


async def test_exit_ends_the_shell_and_the_next_call_gets_a_fresh_one(
    sessions: BashSessions, tmp_path: Path
) -> None:
    await sessions.run("", "cd /; GONE=1")
    result = await sessions.run("", "echo bye; exit 3")
    assert result.outcome is Outcome.SHELL_EXITED
    assert result.exit_code == 3
    assert (result.stdout, result.stderr) == ("bye\n", "")
    after = await sessions.run("", 'echo "$PWD ${GONE-unset}"')
    assert after.stdout == f"{tmp_path} unset\n"
    assert after.outcome is Outcome.EXITED
    replaced = await sessions.run("", "exec python3 -c 'print(42)'")
    assert (replaced.outcome, replaced.exit_code, replaced.stdout) == (
        Outcome.SHELL_EXITED,
        0,
        "42\n",
    )
    assert (await sessions.run("", "echo works")).stdout == "works\n"


async def test_set_e_applies_within_one_call_only(sessions: BashSessions) -> None:
    await sessions.run("", "set -e")
    survived = await sessions.run("", "false; echo still here")
    assert survived.stdout == "still here\n"
    ended = await sessions.run("", "set -e; false; echo unreachable")
    assert ended.outcome is Outcome.SHELL_EXITED
    assert ended.exit_code == 1
    assert ended.stdout == ""


async def test_invalid_requests_are_rejected_with_readable_messages(
    make_sessions: SessionsFactory,
) -> None:
    sessions = make_sessions(max_sessions=2)
    with pytest.raises(InvalidArgumentError, match="No command provided"):
        await sessions.run("", "  \n")
    with pytest.raises(InvalidArgumentError, match="Invalid session name"):
        await sessions.run("bad name!", "true")
    with pytest.raises(InvalidArgumentError, match="timeout"):
        await sessions.run("", "true", timeout_s=-1)
    await sessions.run("one", "true")
    await sessions.run("two", "true")
    with pytest.raises(ResourceExhaustedError, match="limit is 2"):
        await sessions.run("three", "true")
    await sessions.close("one")
    assert (await sessions.run("three", "echo ok")).stdout == "ok\n"


async def test_restart_resets_the_state_and_kills_background_jobs(sessions: BashSessions) -> None:
    job = int((await sessions.run("", f"cd /; X=1; sleep {_token()} & echo $!")).stdout)
    await sessions.restart("")
    assert await _eventually(lambda: not _alive(job))
    assert (await sessions.run("", 'echo "${X-unset}"')).stdout == "unset\n"


async def test_a_cancelled_call_stops_its_command(sessions: BashSessions) -> None:
    token = _token()
    task = asyncio.create_task(sessions.run("", f"sleep {token}"))
    assert await _eventually(lambda: bool(_pids_running(token)))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    result = await asyncio.wait_for(sessions.run("", "echo next"), 5)
    assert result.stdout == "next\n"
    assert not _pids_running(token)


async def test_close_all_leaves_no_process_behind(sessions: BashSessions) -> None:
    plain, nohup, daemon = _token(), _token(), _token()
    result = await sessions.run(
        "",
        f"sleep {plain} & echo $!;"
        f" (nohup sleep {nohup} >/dev/null 2>&1 & echo $!);"
        f" (setsid sleep {daemon} >/dev/null 2>&1 & echo $!)",
    )
    pids = [int(pid) for pid in result.stdout.split()]
    assert len(pids) == 3
    assert all(_alive(pid) for pid in pids)
    await sessions.run("other", "true")

    await sessions.close_all()

    assert await _eventually(lambda: not any(_alive(pid) for pid in pids))
    assert sessions.session_count == 0


async def test_no_zombies_or_leaked_fds_after_many_commands(
    make_sessions: SessionsFactory, reaper: ChildReaper
) -> None:
    fds_before = len(os.listdir("/proc/self/fd"))
    sessions = make_sessions()
    for index in range(5):
        await sessions.run("", f"sleep {_token()} & true")
        await sessions.run("", "sleep 30", timeout_s=0.2)
        await sessions.run(f"s{index}", "(sleep 0.01 &); exit 1")
        await sessions.run(f"s{index}", "echo back")
    await sessions.close_all()

    assert await _eventually(lambda: not _zombie_children())
    assert len(os.listdir("/proc/self/fd")) == fds_before


@pytest.fixture
def process_limits() -> Iterator[SessionLimits]:
    limits = SessionLimits.create(
        max_processes=64,
        max_memory_bytes=256 * 1024 * 1024,
        name=f"test-{os.getpid()}-{random.randrange(10**6)}",
    )
    if limits is None or limits.process_limit_hits() is None:
        if limits is not None:
            limits.destroy()
        pytest.skip("needs a writable pids/memory cgroup (v1 or v2): run as root with cgroupfs")
    yield limits
    limits.destroy()


async def test_a_fork_bomb_is_contained_and_cleaned_up(
    make_sessions: SessionsFactory, process_limits: SessionLimits, reaper: ChildReaper
) -> None:
    sessions = make_sessions(limits=process_limits)
    shell_pid = int((await sessions.run("", "echo $$")).stdout)
    assert process_limits.members() == [shell_pid]

    bomb = await sessions.run("", ":(){ :|:& };:", timeout_s=5)
    assert bomb.outcome in (Outcome.EXITED, Outcome.TIMED_OUT)
    # The runtime, outside the limited group, can still start processes.
    # Spawn and watch in one loop step, as the ChildReaper contract asks.
    pid = os.posix_spawn("/bin/true", ["true"], os.environ)  # noqa: ASYNC221
    assert await asyncio.wait_for(reaper.watch(pid), 5) == 0

    # The bomb runs on in the background until it saturates the limit...
    assert await _eventually(lambda: (process_limits.process_limit_hits() or 0) > 0)

    after = await sessions.run("", "echo ok", timeout_s=10)
    # ...and the next command finds it, kills it and says so.
    assert after.stdout == "ok\n"
    assert "reached the limit of 64 processes" in after.stderr, after.stderr[-300:]
    # Killing 64 processes one signal each can take a while on a loaded 2-core machine.
    assert await _eventually(lambda: process_limits.members() == [shell_pid], 30), (
        process_limits.members()
    )
    assert (await sessions.run("", "ls / >/dev/null && echo forks-again")).stdout == "forks-again\n"


async def test_memory_limit_stops_a_memory_hog_not_the_runtime(
    make_sessions: SessionsFactory, process_limits: SessionLimits
) -> None:
    sessions = make_sessions(limits=process_limits)
    result = await sessions.run(
        "", "python3 -c 'x = bytearray(1024 ** 3); print(len(x))'", timeout_s=60
    )
    assert result.exit_code != 0
    assert result.stdout == ""
    assert (await sessions.run("", "echo alive")).stdout == "alive\n"
    usage = process_limits.memory_usage()
    assert usage is not None
    current, peak = usage
    assert current <= peak <= 256 * 1024 * 1024


async def test_a_prestarted_session_runs_its_first_command_in_the_shell_started_before(
    sessions: BashSessions,
) -> None:
    task = sessions.prestart()
    assert sessions.names == ["default"]
    assert task is not None
    await task
    started = await asyncio.to_thread(process_table)
    shells = sessions.member_pids(started)
    assert len(shells) == 1

    first = await sessions.run("", "echo $$")

    assert int(first.stdout) in shells
    assert sessions.prestart() is None  # open already: nothing new starts
    assert (await sessions.run("", "echo $$")).stdout == first.stdout


async def test_prestart_respects_the_session_maximum(make_sessions: SessionsFactory) -> None:
    sessions = make_sessions(max_sessions=1)
    await sessions.run("other", "true")

    assert sessions.prestart() is None

    assert sessions.names == ["other"]


async def test_a_prestarted_shell_is_under_the_limits_before_its_first_command(
    make_sessions: SessionsFactory, process_limits: SessionLimits
) -> None:
    sessions = make_sessions(limits=process_limits)

    task = sessions.prestart()
    assert task is not None
    await task
    shells = process_limits.members()
    result = await sessions.run("", "echo $$")

    assert shells == [int(result.stdout)]
