"""Throughput of the real `sandfleet batch` with real local sandboxes and a zero-latency model.

    .venv/bin/python -m bench.bench_batch                        # 200 tasks at concurrency 16
    .venv/bin/python -m bench.bench_batch -c 4 16 32 --json bench-batch.json
    .venv/bin/python -m bench.bench_batch --tasks 20             # a quick smoke run

Each concurrency level runs the console script (`.venv/bin/sandfleet batch ...`) as a
subprocess against the scripted OpenAI-compatible server (tests/support/scripted_openai.py,
served from this process) in a fresh temporary state dir and results dir. Every task gets a
small input file and the same realistic trajectory: str_replace_editor creates solve.py,
execute_bash runs it into the answer file, then submit. The model answers at once, so the
time measured is Sandfleet's own: sandbox start, tool calls, HTTP round trips, reclaim.

Reported per level: tasks/minute (end to end, and steady state between the first and last
finished task), p50/p99 per-task time (total_time_s: what a user waits for one task),
failures (not submitted, or a wrong answer), leftovers after the batch (live sandbox
directories or records in the state dir, processes tagged with one of its sandbox ids,
per-sandbox cgroups), peak RSS of the batch process (VmHWM) and of its whole process tree
(sampled), CPU seconds per task, and where a task's time goes. The batch runs with
--log-level info so its sandbox_started events (start_ms) can be read back.
Ctrl-C stops the batch the way a user's Ctrl-C would, then reclaims what is left.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import posixpath
import re
import resource
import shutil
import signal
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

from sandfleet.backends.local import sweep_orphans
from tests.support.scripted_openai import (
    Fail,
    RecordedRequest,
    Reply,
    ScriptedCall,
    ScriptedOpenAIServer,
    Step,
    bash,
    submit,
)
from tests.support.stats import percentile

SANDBOX_TAG = b"SANDFLEET_SANDBOX_ID="
SAMPLE_INTERVAL_S = 0.5
STOP_GRACE_S = 30.0
"""How long a Ctrl-C'd batch may take to reclaim its sandboxes before it is killed."""
BREAKDOWN_PARTS = (
    "sandbox_start", "model_http", "tool_calls", "loop_other", "copy_reclaim_other", "total",
)  # fmt: skip
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

_TASK_LINE = re.compile(rb"\bt\d{4}\b")
"""The batch prints one line per finished task, naming its id (t0000, t0001, ...)."""
_LAYOUT = {
    "working_dir": re.compile(r"Working directory: (\S+)"),
    "input_dir": re.compile(r"Input files for the task \(if any\): (\S+)"),
    "answer_file": re.compile(r"write it to (\S+?)[\s(]"),
}


# --- the model -----------------------------------------------------------------------------
def task_numbers(index: int) -> list[int]:
    return list(range(index, index + 50))


def expected_answer(index: int) -> str:
    return str(sum(n * n for n in task_numbers(index)))


def trajectory_responder(request: RecordedRequest, *, make_answer_dir: bool = False) -> Step:
    """Stateless: the turn is the number of assistant messages so far; the sandbox paths come
    from the default system prompt (they move below a private dir without namespaces).
    `make_answer_dir`: the run step creates the answer file's directory first (a cluster
    sandbox has no output dir until something makes it)."""
    messages: list[dict[str, Any]] = request.body.get("messages", [])
    system = next((str(m.get("content")) for m in messages if m.get("role") == "system"), "")
    layout = {key: pattern.search(system) for key, pattern in _LAYOUT.items()}
    if not all(layout.values()):
        return Fail(400, "bench: no sandbox layout in the system prompt (did it change?)")
    work, inputs, answer = (match.group(1) for match in layout.values() if match is not None)
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    mkdir = f"mkdir -p {posixpath.dirname(answer)} && " if make_answer_dir else ""
    script = f"from pathlib import Path\n\nnumbers = Path('{inputs}/numbers.txt').read_text()\n"
    script += "print(sum(int(n) ** 2 for n in numbers.split()))\n"
    calls: list[list[ScriptedCall]] = [
        [
            ScriptedCall(
                "str_replace_editor",
                {"command": "create", "path": f"{work}/solve.py", "file_text": script},
            )
        ],
        [bash(f"{mkdir}cd {work} && python3 solve.py > {answer} && cat {answer}")],
        [submit()],
    ]
    if turn >= len(calls):
        return Fail(400, f"bench: the script has {len(calls)} turns, turn {turn} was asked")
    return Reply(
        text="Next step.", tool_calls=calls[turn], prompt_tokens=900 + 150 * turn,
        completion_tokens=60,
    )  # fmt: skip


def write_tasks(path: Path, count: int) -> None:
    with path.open("w", encoding="utf-8") as tasks:
        for index in range(count):
            line = {
                "id": f"t{index:04d}",
                "prompt": "Print the sum of the squares of the numbers in numbers.txt.",
                "files": {"numbers.txt": " ".join(map(str, task_numbers(index))) + "\n"},
            }
            tasks.write(json.dumps(line) + "\n")


# --- /proc ---------------------------------------------------------------------------------
def read_stat(pid: int) -> list[bytes] | None:
    """Fields of /proc/<pid>/stat from field 3 (state) on; None once the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].split()


def all_pids() -> Iterator[int]:
    return (int(entry) for entry in os.listdir("/proc") if entry.isdigit())


def tree_rss(root_pid: int) -> tuple[int, int]:
    """(bytes, processes) of root_pid and everything below it, from one /proc scan."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for pid in all_pids():
        fields = read_stat(pid)
        if fields is not None:
            parent[pid], rss[pid] = int(fields[1]), int(fields[21]) * PAGE_BYTES
    members = {root_pid} if root_pid in parent else set()
    grew = True
    while grew:
        below = {pid for pid, ppid in parent.items() if ppid in members} - members
        members |= below
        grew = bool(below)
    return sum(rss[pid] for pid in members), len(members)


def status_kib(pid: int, field: str) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def tagged_processes(sandbox_ids: set[str]) -> list[int]:
    """Live (non-zombie) processes whose environment carries one of these sandbox ids."""
    wanted = {SANDBOX_TAG + sid.encode() for sid in sandbox_ids}
    found = []
    for pid in all_pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        fields = read_stat(pid)
        if fields is not None and fields[0] != b"Z" and wanted & set(environ.split(b"\0")):
            found.append(pid)
    return found


def leftover_cgroups(sandbox_ids: set[str]) -> list[str]:
    """Per-sandbox cgroups (sandfleet-<id>, children of our own cgroup) still present."""
    found = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, own = line.split(":", 2)
        for controller in controllers.split(",") if controllers else ["unified", ""]:
            base = Path("/sys/fs/cgroup", controller, own.lstrip("/"))
            found += [str(base / f"sandfleet-{sid}") for sid in sandbox_ids]
    return sorted({path for path in found if os.path.isdir(path)})


def wait_gone(pid: int, timeout_s: float) -> None:
    """Poll (with a deadline) until pid is reaped; reap it ourselves if nobody else does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fields = read_stat(pid)
        if fields is None:
            return
        if fields[0] == b"Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


def remove_scratch(path: Path) -> None:
    """rmtree that also removes what a sandbox made read-only."""

    def make_writable_and_retry(func: Callable[[str], object], failed: str, _: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), stat.S_IRWXU)
            if not os.path.islink(failed):
                os.chmod(failed, stat.S_IRWXU)
            func(failed)

    shutil.rmtree(path, onerror=make_writable_and_retry)


# --- one batch run -------------------------------------------------------------------------
@dataclasses.dataclass
class Scratch:
    """Everything the final cleanup must reclaim, even after a second Ctrl-C."""

    root: Path
    keep: bool = False
    """Leave the files (task lists, logs, results) for inspection; processes are still reclaimed."""
    batch_pids: set[int] = dataclasses.field(default_factory=set)
    state_dirs: list[Path] = dataclasses.field(default_factory=list)
    interrupted: bool = False
    hurry: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set by a second Ctrl-C: kill the batch now rather than wait for its graceful stop."""

    def reclaim(self) -> None:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # bounded: seconds at most
        try:
            for pid in self.batch_pids:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                wait_gone(pid, 10.0)
            for state_dir in self.state_dirs:  # sandboxes of a killed batch: owner gone
                if state_dir.exists():
                    sweep_orphans(state_dir)
            if self.keep:
                print(f"kept {self.root}", file=sys.stderr)
            else:
                remove_scratch(self.root)
        finally:
            signal.signal(signal.SIGINT, previous)


@dataclasses.dataclass
class Samples:
    batch_hwm_kib: int = 0
    batch_cpu_s: float = 0.0
    """utime + stime of the batch process alone (sandboxes it reaped are in cutime)."""
    tree_peak_bytes: int = 0
    tree_peak_processes: int = 0
    live_sandboxes_peak: int = 0
    sandbox_ids: set[str] = dataclasses.field(default_factory=set)


def take_sample(pid: int, state_dir: Path, samples: Samples) -> None:
    """One look at the batch: its own memory and CPU, its process tree, its live sandboxes."""
    hwm = status_kib(pid, "VmHWM")
    fields = read_stat(pid)
    if hwm is not None and fields is not None:
        samples.batch_hwm_kib = max(samples.batch_hwm_kib, hwm)
        samples.batch_cpu_s = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    rss, processes = tree_rss(pid)
    samples.tree_peak_bytes = max(samples.tree_peak_bytes, rss)
    samples.tree_peak_processes = max(samples.tree_peak_processes, processes)
    with contextlib.suppress(OSError):
        records = [path.stem for path in state_dir.glob("sbx-*.json")]
        samples.sandbox_ids.update(records)
        samples.live_sandboxes_peak = max(samples.live_sandboxes_peak, len(records))


async def sample(pid: int, state_dir: Path, samples: Samples) -> None:
    while True:
        await asyncio.to_thread(take_sample, pid, state_dir, samples)
        await asyncio.sleep(SAMPLE_INTERVAL_S)


def cli_command(*args: str) -> list[str]:
    console_script = Path(sys.executable).with_name("sandfleet")
    if console_script.exists():
        return [str(console_script), *args]
    return [sys.executable, "-m", "sandfleet.cli", *args]


async def read_lines(stream: asyncio.StreamReader, stamps: list[float], sink: Path) -> None:
    """Keep the batch's stdout flowing; time-stamp the lines of finished tasks."""
    with sink.open("wb") as out:
        while line := await stream.readline():
            if _TASK_LINE.search(line):
                stamps.append(time.perf_counter())
            out.write(line)


async def stop(process: asyncio.subprocess.Process, hurry: asyncio.Event) -> None:
    """What a user's Ctrl-C does (SIGINT to the group); SIGKILL after a grace period, or at
    once when `hurry` is set (a second Ctrl-C)."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
    exited = asyncio.ensure_future(process.wait())
    hurried = asyncio.ensure_future(hurry.wait())
    await asyncio.wait({exited, hurried}, timeout=STOP_GRACE_S, return_when=asyncio.FIRST_COMPLETED)
    hurried.cancel()
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    await exited


@dataclasses.dataclass(frozen=True, slots=True)
class CliRun:
    """One `sandfleet` subprocess, run to its end (or stopped at the timeout)."""

    exit_code: int | None
    timed_out: bool
    elapsed_s: float
    stamps: list[float]
    """When each of its result lines was printed, in seconds after the start."""


async def run_cli(
    scratch: Scratch,
    work: Path,
    command: Sequence[str],
    env: dict[str, str],
    timeout_s: float,
    *,
    name: str,
    watch: Callable[[int], Coroutine[Any, Any, None]] | None = None,
) -> CliRun:
    """`command` in `work` (stdout to NAME.out, line by line with its stamps; stderr to
    NAME.log), with `watch(pid)` running alongside; a timeout or Ctrl-C stops it as a user's
    Ctrl-C would (stop())."""
    stamps: list[float] = []
    started = time.perf_counter()
    with (work / f"{name}.log").open("wb") as log_file:
        process = await asyncio.create_subprocess_exec(
            *command, env=env, cwd=work, stdout=asyncio.subprocess.PIPE, stderr=log_file,
            start_new_session=True,  # our Ctrl-C is forwarded by stop(), as a terminal's
        )  # fmt: skip
    scratch.batch_pids.add(process.pid)
    assert process.stdout is not None
    watcher = asyncio.create_task(watch(process.pid)) if watch else None
    reader = asyncio.create_task(read_lines(process.stdout, stamps, work / f"{name}.out"))
    timed_out = False
    try:
        async with asyncio.timeout(timeout_s):
            await process.wait()
    except TimeoutError:
        timed_out = True
    finally:
        if watcher is not None:
            watcher.cancel()
        await stop(process, scratch.hurry)
        await asyncio.gather(*(t for t in (watcher, reader) if t), return_exceptions=True)
    elapsed = time.perf_counter() - started
    return CliRun(process.returncode, timed_out, elapsed, [t - started for t in stamps])


async def run_level(
    scratch: Scratch, tasks: int, concurrency: int, isolation: str, timeout_s: float
) -> dict[str, Any]:
    work = scratch.root / f"c{concurrency}"
    state_dir, home = work / "state", work / "home"
    home.mkdir(parents=True)
    scratch.state_dirs.append(state_dir)
    write_tasks(work / "tasks.jsonl", tasks)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache"),
        "LANG": "C.UTF-8", "COLUMNS": "200", "OPENAI_API_KEY": "sk-bench-placeholder",
    }  # fmt: skip
    samples = Samples()
    load_before = os.getloadavg()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    self_before = resource.getrusage(resource.RUSAGE_SELF)
    async with ScriptedOpenAIServer(responder=trajectory_responder) as server:
        command = cli_command(
            "batch", "tasks.jsonl", "--out", "results.jsonl",
            "--concurrency", str(concurrency), "--model", "bench-model",
            "--base-url", server.base_url, "--max-retries", "0", "--max-turns", "10",
            "--results-dir", str(work / "results"), "--state-dir", str(state_dir),
            "--isolation", isolation, "--log-level", "info", "--log-json",
        )  # fmt: skip
        run = await run_cli(
            scratch, work, command, env, timeout_s, name="batch",
            watch=lambda pid: sample(pid, state_dir, samples),
        )  # fmt: skip
        chat_requests = len(server.chat_requests)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    measured = Measured(
        work=work, tasks=tasks, concurrency=concurrency, exit_code=run.exit_code,
        timed_out=run.timed_out, elapsed_s=run.elapsed_s, finish_stamps=run.stamps,
        chat_requests=chat_requests, samples=samples, load_before=load_before,
        children_cpu_s=cpu_seconds(children) - cpu_seconds(children_before),
        server_cpu_s=cpu_seconds(own) - cpu_seconds(self_before),
    )  # fmt: skip
    return summarize(measured)


@dataclasses.dataclass
class Measured:
    """What one batch run left to look at: its clocks, samples and files (under work)."""

    work: Path
    tasks: int
    concurrency: int
    exit_code: int | None
    timed_out: bool
    elapsed_s: float
    finish_stamps: list[float]
    """Seconds after the start when each task's line was printed."""
    chat_requests: int
    samples: Samples
    load_before: tuple[float, float, float]
    children_cpu_s: float
    """The batch and everything it reaped (its sandboxes)."""
    server_cpu_s: float
    """This process: the scripted model server (and the sampler)."""


def cpu_seconds(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def summarize(m: Measured) -> dict[str, Any]:
    """The run's numbers, leftovers and failures, from its samples and the batch's files."""
    samples, state_dir = m.samples, m.work / "state"
    events = read_events(m.work / "batch.log")
    started_events = [e for e in events if e.get("event") == "sandbox_started"]
    samples.sandbox_ids.update(str(e["sandbox"]) for e in started_events if "sandbox" in e)
    outcomes = read_results(m.work / "results.jsonl")
    wrong = [o["id"] for o in outcomes if o.get("answer") != expected_answer(int(o["id"][1:]))]
    not_submitted = [o["id"] for o in outcomes if o.get("stop_reason") != "submitted"]
    leftover_dirs = sorted(p.name for p in state_dir.iterdir()) if state_dir.exists() else []
    totals = [float(o.get("total_time_s", 0.0)) for o in outcomes]
    stamps = m.finish_stamps
    return {
        "tasks": m.tasks,
        "concurrency": m.concurrency,
        "exit_code": m.exit_code,
        "timed_out": m.timed_out,
        "elapsed_s": round(m.elapsed_s, 2),
        "recorded": len(outcomes),
        "failures": len(set(not_submitted) | set(wrong)) + (m.tasks - len(outcomes)),
        "failed_ids": sorted(set(not_submitted) | set(wrong))[:20],
        "tasks_per_min": round(len(outcomes) / m.elapsed_s * 60, 1),
        "steady_tasks_per_min": steady_rate(stamps),
        "first_result_s": round(stamps[0], 2) if stamps else None,
        "task_time_p50_s": round(percentile(totals, 0.50), 3),
        "task_time_p99_s": round(percentile(totals, 0.99), 3),
        "breakdown_mean_s": breakdown(outcomes, started_events),
        "chat_requests": m.chat_requests,
        "sandboxes_started": len(started_events),
        "sandboxes_closed": sum(1 for e in events if e.get("event") == "sandbox_closed"),
        "isolation": sorted({str(e.get("mechanism")) for e in started_events}),
        "live_sandboxes_peak": samples.live_sandboxes_peak,
        "warnings": warning_counts(events),
        "leftover_state_entries": leftover_dirs,
        "leftover_tagged_processes": tagged_processes(samples.sandbox_ids),
        "leftover_cgroups": leftover_cgroups(samples.sandbox_ids),
        "batch_peak_rss_mib": round(samples.batch_hwm_kib / 1024, 1),
        "tree_peak_rss_mib": round(samples.tree_peak_bytes / 2**20, 1),
        "tree_peak_processes": samples.tree_peak_processes,
        "cpu_ms_per_task": {
            "batch_process": per_task_ms(samples.batch_cpu_s, len(outcomes)),
            "sandboxes": per_task_ms(m.children_cpu_s - samples.batch_cpu_s, len(outcomes)),
            "model_server": per_task_ms(m.server_cpu_s, len(outcomes)),
        },
        "loadavg_before": [round(x, 2) for x in m.load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }


# --- reading the batch's files -------------------------------------------------------------
def read_results(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def read_events(path: Path) -> list[dict[str, Any]]:
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict):
                events.append(event)
    return events


def warning_counts(events: Sequence[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in events:
        if event.get("level") in ("warning", "error", "critical"):
            name = str(event.get("event"))
            counts[name] = counts.get(name, 0) + 1
    return counts


def breakdown(
    outcomes: Sequence[dict[str, Any]], started: Sequence[dict[str, Any]]
) -> dict[str, float]:
    """Mean seconds per task: sandbox start (its log), model HTTP and tool calls (the loop's
    clocks), the loop's own time, and the rest (outputs copied back, reclaim, result files)."""
    if not outcomes:
        return {}

    def mean(key: str) -> float:
        return statistics.fmean(float(o.get(key, 0.0)) for o in outcomes)

    start = (
        statistics.fmean(float(e.get("start_ms", 0.0)) for e in started) / 1000 if started else 0.0
    )
    model, tools, loop, total = (
        mean("model_time_s"),
        mean("tool_time_s"),
        mean("wall_time_s"),
        mean("total_time_s"),
    )
    parts = {
        "sandbox_start": start, "model_http": model, "tool_calls": tools,
        "loop_other": loop - model - tools, "copy_reclaim_other": total - loop - start,
        "total": total,
    }  # fmt: skip
    return {key: round(value, 4) for key, value in parts.items()}


def steady_rate(finish_stamps: Sequence[float]) -> float | None:
    if len(finish_stamps) < 2 or finish_stamps[-1] <= finish_stamps[0]:
        return None
    return round((len(finish_stamps) - 1) / (finish_stamps[-1] - finish_stamps[0]) * 60, 1)


def per_task_ms(seconds: float, tasks: int) -> float | None:
    return round(seconds / tasks * 1000, 1) if tasks else None


# --- report --------------------------------------------------------------------------------
def load_before_after(run: dict[str, Any]) -> str:
    return f"{run['loadavg_before'][0]:g} / {run['loadavg_after'][0]:g}"


def field_of(group: str, key: str) -> Callable[[dict[str, Any]], object]:
    return lambda run: run[group].get(key)


def print_table(runs: Sequence[dict[str, Any]]) -> None:
    rows: list[tuple[str, Callable[[dict[str, Any]], object]]] = [
        ("tasks / concurrency", lambda r: f"{r['tasks']} / {r['concurrency']}"),
        ("tasks/min (end to end)", lambda r: r["tasks_per_min"]),
        ("tasks/min (steady)", lambda r: r["steady_tasks_per_min"]),
        ("batch wall s", lambda r: r["elapsed_s"]),
        ("first result after s", lambda r: r["first_result_s"]),
        ("task time p50 s", lambda r: r["task_time_p50_s"]),
        ("task time p99 s", lambda r: r["task_time_p99_s"]),
        ("failures", lambda r: r["failures"]),
        ("exit code", lambda r: r["exit_code"]),
        ("leftover state entries", lambda r: len(r["leftover_state_entries"])),
        ("leftover tagged procs", lambda r: len(r["leftover_tagged_processes"])),
        ("leftover cgroups", lambda r: len(r["leftover_cgroups"])),
        ("batch peak RSS MiB", lambda r: r["batch_peak_rss_mib"]),
        ("tree peak RSS MiB (sampled)", lambda r: r["tree_peak_rss_mib"]),
        ("peak live sandboxes (sampled)", lambda r: r["live_sandboxes_peak"]),
    ]
    for part in BREAKDOWN_PARTS:
        rows.append((f"mean {part} s", field_of("breakdown_mean_s", part)))
    for owner in ("batch_process", "sandboxes", "model_server"):
        rows.append((f"CPU ms/task {owner}", field_of("cpu_ms_per_task", owner)))
    rows.append(("isolation", lambda r: ",".join(r["isolation"])))
    rows.append(("1-min load avg before/after", load_before_after))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        cells = "".join(f"{value(run)!s:>18}" for run in runs)
        print(f"{label:<{width}}{cells}")
    for run in runs:
        if run["warnings"] or run["failed_ids"] or run["timed_out"]:
            print(f"c={run['concurrency']}: warnings {run['warnings']} failed {run['failed_ids']}"
                  f" timed_out={run['timed_out']}")  # fmt: skip


async def run_levels(
    concurrencies: Sequence[int],
    units: str,
    budget_s: float,
    scratch: Scratch,
    level: Callable[[int, float], Awaitable[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Every level in turn (`level(concurrency, seconds_left)`); a first Ctrl-C stops the
    running command gracefully and ends the bench (the levels done so far are reported), a
    second one kills it at once. `units` names what a level runs, e.g. "200 tasks"."""
    main_task = asyncio.current_task()
    assert main_task is not None
    presses = 0

    def on_ctrl_c() -> None:
        nonlocal presses
        presses += 1
        print("interrupted: stopping the run (Ctrl-C again to kill it)", file=sys.stderr)
        if presses == 1:
            main_task.cancel()
        else:
            scratch.hurry.set()

    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, on_ctrl_c)
    deadline = time.monotonic() + budget_s
    runs: list[dict[str, Any]] = []
    for concurrency in concurrencies:
        remaining = deadline - time.monotonic()
        if remaining < 10:
            print(f"skipping concurrency {concurrency}: the time budget is spent", flush=True)
            continue
        print(f"running {units} at concurrency {concurrency} ...", flush=True)
        try:
            runs.append(await level(concurrency, remaining))
        except asyncio.CancelledError:
            scratch.interrupted = True
            main_task.uncancel()
            break
    return runs


async def bench(args: argparse.Namespace, scratch: Scratch) -> list[dict[str, Any]]:
    async def level(concurrency: int, remaining: float) -> dict[str, Any]:
        return await run_level(scratch, args.tasks, concurrency, args.isolation, remaining)

    return await run_levels(args.concurrency, f"{args.tasks} tasks", args.budget_s, scratch, level)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", "-n", type=int, default=200)
    parser.add_argument("--concurrency", "-c", type=int, nargs="+", default=[16])
    parser.add_argument("--isolation", choices=["auto", "namespaces", "none"], default="auto")
    parser.add_argument(
        "--budget-s", type=float, default=270.0,
        help="wall-clock budget for all levels; a batch still running at the end is stopped",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, results)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    scratch = Scratch(Path(tempfile.mkdtemp(prefix="sandfleet-bench-batch-")), keep=args.keep)
    runs: list[dict[str, Any]] = []
    try:
        runs = asyncio.run(bench(args, scratch))
    except KeyboardInterrupt:  # between asyncio.run's start and our handler, or after it
        scratch.interrupted = True
    finally:
        scratch.reclaim()
    if runs:
        print_table(runs)
    if args.json:
        meta = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
        args.json.write_text(json.dumps({"machine": meta, "runs": runs}, indent=2) + "\n")
    if scratch.interrupted:
        return 130
    return 0 if runs and all(map(is_clean, runs)) else 1


def is_clean(run: dict[str, Any]) -> bool:
    leftovers = ("leftover_state_entries", "leftover_tagged_processes", "leftover_cgroups")
    finished = run["exit_code"] == 0 and not run["timed_out"]
    finished = finished and run["sandboxes_closed"] == run["sandboxes_started"] == run["tasks"]
    return finished and run["failures"] == 0 and not any(run[key] for key in leftovers)


if __name__ == "__main__":
    sys.exit(main())
