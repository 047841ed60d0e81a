"""Loading seed-format benchmark folders and checking their rows before any model call."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sandfleet.eval.bench_folder import BenchError, load_benchmark
from sandfleet.eval.problems import problems_from_rows, sandbox_task
from sandfleet.sandbox.facade import SandboxPaths

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "bench" / "arithmetic"


def make_bench(root: Path, rows: Any, *, config: str | None = None, name: str = "task") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "reward.py").write_text("def compute_score(a, g, **k):\n    return 1.0\n")
    (folder / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "config.yaml").write_text(config or "dataset: json\ndata_files: rows.jsonl\n")
    return folder


def test_the_shipped_example_loads_with_its_data_file_relative_to_the_parent() -> None:
    benchmark = load_benchmark(EXAMPLE)
    problems = problems_from_rows(benchmark)
    assert [p.id for p in problems] == ["sum-of-squares", "fibonacci-30", "orders-total",
                                        "longest-word"]  # fmt: skip
    assert {p.domain for p in problems} == {"math", "data"}
    orders = problems[2]
    assert set(orders.input_files) == {"orders.csv"}  # given as a JSON string, null skipped
    assert orders.reward_kwargs()["tolerance"] == 0.005
    assert "ground_truth" not in orders.reward_kwargs()
    assert benchmark.paths == SandboxPaths()
    assert benchmark.vanilla_prompt_file is not None
    task = sandbox_task(problems[0], 2, benchmark)
    assert task.files == {"numbers.txt": b"3 14 15 92 65 35 89 79 32 38 46\n"}
    assert task.system_prompt is not None and "{output_dir}/answer.txt" in task.system_prompt


def test_data_files_relative_to_the_parent_like_the_seed(tmp_path: Path) -> None:
    folder = make_bench(tmp_path, [], config="dataset: json\ndata_files: data/math.json\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "math.json").write_text(
        json.dumps([{"id": 1, "problem_statement": "p", "ground_truth": "g"}])
    )
    (problem,) = problems_from_rows(load_benchmark(folder))
    assert (problem.id, problem.domain) == ("1", "task")


def test_output_dir_moves_the_answer_file(tmp_path: Path) -> None:
    config = 'dataset: json\ndata_files: rows.jsonl\noutput_dir: "/testbed"\n'
    folder = make_bench(tmp_path, [], config=config)
    paths = load_benchmark(folder).paths
    assert paths is not None
    assert (paths.output_dir, paths.answer_file) == ("/testbed", "/testbed/answer.txt")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"problem_statement": "p", "ground_truth": "g"}, "row 1: missing id"),
        ({"id": "x", "ground_truth": "g"}, "row 1 (id 'x'): missing problem_statement"),
        ({"id": "x", "problem_statement": "p"}, "row 1 (id 'x'): missing ground_truth"),
        ({"id": "x", "problem_statement": "", "ground_truth": "g"}, "non-empty string"),
        ({"id": "x", "problem_statement": "p", "ground_truth": "g", "input_files": "{oops"},
         "input_files is not valid JSON"),
        ({"id": "x", "problem_statement": "p", "ground_truth": "g", "input_files": [1]},
         "input_files must be an object"),
        ({"id": "x", "problem_statement": "p", "ground_truth": "g",
          "input_files": {"../escape": "t"}}, "must stay in the input folder"),
        ({"id": "ok", "problem_statement": "p", "ground_truth": "g"}, "id 'ok' already used"),
    ],
)  # fmt: skip
def test_a_malformed_row_is_named(tmp_path: Path, row: dict[str, Any], message: str) -> None:
    good = {"id": "ok", "problem_statement": "p", "ground_truth": "g"}
    folder = make_bench(tmp_path, [good, row])
    with pytest.raises(BenchError, match=r"rows\.jsonl: ") as raised:
        problems_from_rows(load_benchmark(folder))
    assert message in str(raised.value)


def test_a_dataset_name_without_the_datasets_library_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    config = "dataset: some-org/some-benchmark\nconfig: main\nsplit: test\n"
    folder = make_bench(tmp_path, [], config=config)
    with pytest.raises(BenchError, match=r"`datasets` library, which is not installed"):
        load_benchmark(folder)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "has no config.yaml"),
        ({"config.yaml": "dataset: json\ndata_files: nowhere.jsonl\n"}, "nowhere.jsonl not found"),
        ({"config.yaml": "- a list\n"}, "must be a mapping"),
    ],
)
def test_a_broken_folder_is_a_clear_error(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "reward.py").write_text("")
    for name, text in files.items():
        (folder / name).write_text(text)
    with pytest.raises(BenchError, match=message):
        load_benchmark(folder)
