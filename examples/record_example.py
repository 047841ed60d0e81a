"""Record the shipped example trajectory: the real CLI runs a real task with a scripted model.

    .venv/bin/python examples/record_example.py            # rewrites the shipped trajectory
    .venv/bin/python examples/record_example.py --out /tmp/check.jsonl

`sandfleet run` solves examples/tasks/01_sales_by_region in a real local sandbox (Linux
namespaces required, so the model sees /testbed as on any other machine), driven by the
scripted OpenAI-compatible server from tests/support; the run's trajectory.jsonl is copied to
examples/trajectories/. Replay it anywhere, no model needed:

    sandfleet replay examples/trajectories/sales_by_region.jsonl

Every command in the script has a deterministic output (no timings, dates or process ids),
so the replayed observations match the recorded ones byte for byte.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

EXAMPLES = Path(__file__).resolve().parent
REPOSITORY = EXAMPLES.parent
TASK = EXAMPLES / "tasks" / "01_sales_by_region"
SHIPPED = EXAMPLES / "trajectories" / "sales_by_region.jsonl"
MODEL_NAME = "scripted-analyst"

REVENUE_AWK = """\
# Revenue in cents (units * unit price) per region of a sales CSV.
BEGIN { FS = "," }
NR > 1 { revenue[$2] += $4 * $5 }
END { for (region in revenue) print region "," revenue[region] }
"""


def _load_scripted_server() -> ModuleType:
    # tests/ is not an installed package; load the one module this script needs by path.
    path = REPOSITORY / "tests" / "support" / "scripted_openai.py"
    spec = importlib.util.spec_from_file_location("scripted_openai", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def model_script(scripted: ModuleType) -> list[Any]:
    """What the scripted model says, turn by turn: look, write a script, run, fix, answer."""
    reply, call, bash = scripted.Reply, scripted.ScriptedCall, scripted.bash

    def editor(**arguments: Any) -> Any:
        return call("str_replace_editor", arguments)

    return [
        reply(
            text="First I look at the input data.",
            tool_calls=[editor(command="view", path="/testbed/input/sales.csv")],
            prompt_tokens=812, completion_tokens=41,
        ),
        reply(
            text="Revenue is units times unit price; an awk script can total it per region.",
            tool_calls=[
                editor(command="create", path="/testbed/revenue.awk", file_text=REVENUE_AWK)
            ],
            prompt_tokens=1133, completion_tokens=152,
        ),
        reply(
            tool_calls=[bash("cd /testbed && awk -f revenue.awk input/sales.csv | sort")],
            prompt_tokens=1342, completion_tokens=38,
        ),
        reply(
            text="The regions should come highest revenue first; the script can sort its output.",
            tool_calls=[
                editor(
                    command="str_replace",
                    path="/testbed/revenue.awk",
                    old_str='print region "," revenue[region] }',
                    new_str='print region "," revenue[region] | "sort -t, -k2,2nr" }',
                )
            ],
            prompt_tokens=1425, completion_tokens=97,
        ),
        reply(
            tool_calls=[
                bash(
                    "cd /testbed && { echo region,revenue_cents; awk -f revenue.awk "
                    "input/sales.csv; } > output/revenue_by_region.csv "
                    "&& cat output/revenue_by_region.csv"
                )
            ],
            prompt_tokens=1618, completion_tokens=71,
        ),
        reply(
            text="East is highest. Writing the answer file.",
            tool_calls=[
                bash(
                    "cd /testbed && sed -n 2p output/revenue_by_region.csv | tr , ' ' "
                    "> output/answer.txt && cat output/answer.txt"
                )
            ],
            prompt_tokens=1760, completion_tokens=64,
        ),
        reply(
            text="The answer is in /testbed/output/answer.txt.",
            tool_calls=[scripted.submit()],
            prompt_tokens=1851, completion_tokens=19,
        ),
    ]  # fmt: skip


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("sandfleet")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sandfleet.cli"]


async def record(out: Path) -> dict[str, Any]:
    scripted = _load_scripted_server()
    with tempfile.TemporaryDirectory(prefix="sandfleet-record-") as scratch:
        workdir = Path(scratch)
        async with scripted.ScriptedOpenAIServer(model_script(scripted)) as server:
            process = await asyncio.create_subprocess_exec(
                *_cli(), "run", str(TASK),
                "--model", MODEL_NAME,
                "--base-url", server.base_url,
                "--isolation", "namespaces",
                "--results-dir", "sandfleet-results",
                "--state-dir", str(workdir / "state"),
                "--quiet",
                cwd=workdir,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            output, _ = await process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"the run failed (exit {process.returncode}):\n{output.decode()}")
        # The run's folder is <task>-<UTC time>; the scratch folder holds this one run only.
        (results,) = (workdir / "sandfleet-results").glob(f"{TASK.name}-*")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(results / "trajectory.jsonl", out)
        outcome: dict[str, Any] = json.loads((results / "result.json").read_text())
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SHIPPED, help=f"default {SHIPPED}")
    args = parser.parse_args()
    outcome = asyncio.run(record(args.out))
    print(f"{outcome['stop_reason']}: {outcome['answer']!r} -> {args.out}")


if __name__ == "__main__":
    main()
