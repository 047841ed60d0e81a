"""`sandfleet serve` against the same real model called plainly: the paper's table on our stack.

    bash tests/model/setup.sh                                   # once: the server and the model
    flock /tmp/sandfleet-model.lock .venv/bin/python -m bench.bench_serve_real_model
    ... -m bench.bench_serve_real_model --kinds maths --max-turns 4   # a part

One llama.cpp server with Qwen2.5-Coder-1.5B (Q4_K_M; tests/model/model_server.py: 1 thread,
one slot, 8,192-token context). A small fixed set of questions of the paper's kinds (maths
that profits from computing, a data question over a small attached CSV, instruction
following), each asked twice with the official `openai` client at temperature 0:
- vanilla: straight to the upstream, no tools, the CSV pasted into the question;
- sandbox: through `sandfleet serve --config` (its own process, local namespaced sandboxes),
  the CSV as a chat `file` content part, answered by the paper's loop.
Requests go one at a time (the server has one slot: concurrent requests would only queue
there), all vanilla ones first, then all sandbox ones, so each mode keeps llama.cpp's prompt
cache to itself as a server doing only that mode would. Per mode: requests per minute, p50
latency, tokens per request (`usage`, every model call of the loop summed), right answers
(a simple check per question); for sandbox mode also turns per request and, from serve's
accounting extension, the environment's share of the prompt (the tool observations' share
of the last prompt's characters, serve's estimate of its token share) and of wall time
(tool time over the loop's wall time). The 1-minute load average is printed with the table.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import os
import re
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import openai

from bench.bench_serve import serve
from tests.model.model_server import (
    MODEL_NAME,
    ModelServerFailed,
    ModelUnavailable,
    running_model_server,
)
from tests.support.stats import percentile

SERVED = "sandboxed"
SALES_CSV = textwrap.dedent("""\
    region,product,amount
    north,tea,120
    south,coffee,340
    north,coffee,75
    east,tea,60
    south,tea,210
    north,juice,95
    east,coffee,180
    west,juice,130
    north,tea,45
    west,coffee,220
    """)


def number(expected: int) -> Callable[[str], bool]:
    """Right when the answer holds `expected` as a whole number (thousands separators ok)."""
    pattern = re.compile(rf"(?<![\d.]){expected}(?![\d]|\.\d)")
    return lambda answer: bool(pattern.search(answer.replace(",", "")))


def word(expected: str) -> Callable[[str], bool]:
    """Right when the answer holds `expected` as a word, case ignored."""
    pattern = re.compile(rf"\b{re.escape(expected)}\b", re.IGNORECASE)
    return lambda answer: bool(pattern.search(answer))


def only(pattern: str) -> Callable[[str], bool]:
    """Right when the whole answer (trimmed, outer quotes dropped) matches `pattern`."""
    compiled = re.compile(pattern)
    return lambda answer: bool(compiled.fullmatch(answer.strip().strip("\"'`").strip()))


@dataclasses.dataclass(frozen=True)
class Question:
    name: str
    kind: str
    text: str
    check: Callable[[str], bool]
    csv: str | None = None
    """A CSV attached as sales.csv: a file part through serve, pasted in for vanilla."""

    def vanilla_messages(self) -> list[dict[str, Any]]:
        text = self.text
        if self.csv is not None:
            text = f"The file sales.csv:\n```\n{self.csv}```\n\n{text}"
        return [{"role": "user", "content": text}]

    def sandbox_messages(self) -> list[dict[str, Any]]:
        if self.csv is None:
            return [{"role": "user", "content": self.text}]
        data = base64.b64encode(self.csv.encode()).decode()
        part = {"type": "file", "file": {"filename": "sales.csv", "file_data": data}}
        return [{"role": "user", "content": [{"type": "text", "text": self.text}, part]}]


QUESTIONS = (
    Question("product-minus", "maths", "What is 7919 * 6007 - 123456? Answer with the number.",
             number(47445977)),
    Question("prime-sum", "maths", "What is the sum of all prime numbers below 2000? Answer "
             "with the number.", number(277050)),
    Question("north-total", "data", "In sales.csv, what is the total amount of the north "
             "region? Answer with the number.", number(335), SALES_CSV),
    Question("top-product", "data", "In sales.csv, which product has the largest total "
             "amount over all regions? Answer with the product's name.", word("coffee"),
             SALES_CSV),
    Question("reversed", "instructions", "Write the word 'sandbox' backwards, in lowercase. "
             "Answer with that word only, nothing else.", only(r"xobdnas\.?")),
    Question("six-words", "instructions", "Write one sentence of exactly six words about the "
             "sea, all in lowercase letters, ending with a period. Answer with the sentence "
             "only.", only(r"[a-z]+( [a-z]+){5}\.")),
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Answer:
    """One request's outcome; `accounting` is serve's `sandfleet` extension (sandbox mode)."""

    question: str
    mode: str
    right: bool
    seconds: float
    prompt_tokens: int
    completion_tokens: int
    text: str
    accounting: dict[str, Any] | None = None
    error: str | None = None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(answers: Sequence[Answer], elapsed_s: float) -> dict[str, Any]:
    """One mode's row: QPM over `elapsed_s` (the requests ran one after another), p50
    latency, means per request, and for sandbox answers the environment's shares."""
    ok = [a for a in answers if a.error is None]
    books = [a.accounting for a in ok if a.accounting is not None]
    shares = [float(b["environment_token_share"]) for b in books
              if b.get("environment_token_share") is not None]  # fmt: skip
    wall = sum(float(b["wall_time_s"]) for b in books)
    return {
        "requests": len(answers),
        "failed": len(answers) - len(ok),
        "right": sum(a.right for a in answers),
        "qpm": len(answers) / elapsed_s * 60 if elapsed_s > 0 else None,
        "p50_s": percentile([a.seconds for a in ok], 0.5) if ok else None,
        "prompt_tokens": _mean([a.prompt_tokens for a in ok]),
        "completion_tokens": _mean([a.completion_tokens for a in ok]),
        "turns": _mean([float(b["turns"]) for b in books]),
        "env_token_share": _mean(shares),
        "env_time_share": sum(float(b["tool_time_s"]) for b in books) / wall if wall else None,
        "model_time_share": sum(float(b["model_time_s"]) for b in books) / wall if wall else None,
    }


def _cell(value: Any, form: str) -> str:
    return "-" if value is None else format(value, form)


def table(rows: dict[str, dict[str, Any]]) -> str:
    """The summary rows as a Markdown table, one line per mode."""
    header = ("mode", "requests", "right", "QPM (sequential)", "p50 latency", "prompt tok/req",
              "completion tok/req", "turns/req", "env share of prompt", "env share of time",
              "model share of time")  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for mode, row in rows.items():
        failed = f" ({row['failed']} failed)" if row["failed"] else ""
        cells = (
            mode, f"{row['requests']}{failed}", f"{row['right']}/{row['requests']}",
            _cell(row["qpm"], ".2f"), _cell(row["p50_s"], ".1f") + " s",
            _cell(row["prompt_tokens"], ",.0f"), _cell(row["completion_tokens"], ",.0f"),
            _cell(row["turns"], ".1f"), _cell(row["env_token_share"], ".0%"),
            _cell(row["env_time_share"], ".1%"), _cell(row["model_time_share"], ".0%"),
        )  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def ask(client: openai.AsyncOpenAI, model: str, question: Question, mode: str,
              max_tokens: int) -> Answer:  # fmt: skip
    """One request, timed; an API error is an answer with `error` set (the run goes on)."""
    messages: Any = (question.sandbox_messages() if mode == "sandbox"
                     else question.vanilla_messages())  # fmt: skip
    started = time.perf_counter()
    try:
        reply = await client.chat.completions.create(
            model=model, messages=messages, temperature=0, max_tokens=max_tokens
        )
    except openai.APIError as error:
        seconds = time.perf_counter() - started
        return Answer(question.name, mode, False, seconds, 0, 0, "", error=str(error)[:200])
    seconds = time.perf_counter() - started
    text = reply.choices[0].message.content or "" if reply.choices else ""
    usage = reply.usage
    return Answer(
        question.name, mode, question.check(text), seconds,
        usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0,
        text, (reply.model_extra or {}).get("sandfleet"),
    )  # fmt: skip


async def run_mode(
    client: openai.AsyncOpenAI, model: str, mode: str, questions: Sequence[Question],
    max_tokens: int,
) -> tuple[list[Answer], float]:  # fmt: skip
    """The questions one after another; the answers and the seconds they took in all."""
    answers = []
    started = time.perf_counter()
    for question in questions:
        print(f"  {mode} {question.name} (load {_load()}) ...", flush=True)
        answer = await ask(client, model, question, mode, max_tokens)
        answers.append(answer)
        # Everything the table sums, per request: a run cut short still leaves its numbers.
        print(
            f"    {answer.seconds:.1f} s, right={answer.right}, tokens={answer.prompt_tokens}/"
            f"{answer.completion_tokens}, error={answer.error}, "
            f"accounting={answer.accounting}, answer={answer.text[:120]!r}",
            flush=True,
        )
    return answers, time.perf_counter() - started


def write_config(folder: Path, base_url: str, max_turns: int, max_tokens: int) -> Path:
    path = folder / "serve.toml"
    path.write_text(textwrap.dedent(f"""\
        [server]
        state_dir = "{folder / "state"}"

        [models.{SERVED}]
        upstream.base_url = "{base_url}"
        upstream.model = "{MODEL_NAME}"
        temperature = 0
        max_turns = {max_turns}
        max_tokens = {max_tokens}
        tool_timeout_seconds = 60
        request_timeout_seconds = 900
        warm = 1
        """))  # fmt: skip
    return path


async def bench(args: argparse.Namespace, scratch: Path) -> dict[str, list[Answer]]:
    questions = [q for q in QUESTIONS if not args.kinds or q.kind in args.kinds]
    results: dict[str, list[Answer]] = {}
    elapsed: dict[str, float] = {}
    with running_model_server(scratch) as model:
        async with openai.AsyncOpenAI(base_url=model.base_url, api_key="x", max_retries=0,
                                      timeout=900) as direct:  # fmt: skip
            results["vanilla"], elapsed["vanilla"] = await run_mode(
                direct, model.model, "vanilla", questions, args.max_tokens
            )
        config = write_config(scratch, model.base_url, args.max_turns, args.max_tokens)
        async with (
            serve(config, scratch) as (base_url, _),
            openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0,
                               timeout=1800) as client,
        ):  # fmt: skip
            results["sandbox"], elapsed["sandbox"] = await run_mode(
                client, SERVED, "sandbox", questions, args.max_tokens
            )
    print(f"\nload average after: {_load()}\n")
    print(table({mode: summarize(answers, elapsed[mode]) for mode, answers in results.items()}))
    return results


def per_question(results: dict[str, list[Answer]]) -> str:
    lines = ["| question | mode | right | seconds | turns | prompt / completion tokens |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for answers in results.values():
        for a in answers:
            turns = (a.accounting or {}).get("turns", "-")
            lines.append(f"| {a.question} | {a.mode} | {'yes' if a.right else 'no'} | "
                         f"{a.seconds:.1f} | {turns} | {a.prompt_tokens:,} / "
                         f"{a.completion_tokens:,} |")  # fmt: skip
    return "\n".join(lines)


def _load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kinds", nargs="*", choices=sorted({q.kind for q in QUESTIONS}))
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=512, help="per model call")
    args = parser.parse_args()
    print(f"load average before: {_load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-serve-real-model-") as scratch:
        try:
            results = asyncio.run(bench(args, Path(scratch)))
        except (ModelUnavailable, ModelServerFailed) as error:
            print(f"no model: {error}", file=sys.stderr)
            return 2
    print("\n" + per_question(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
