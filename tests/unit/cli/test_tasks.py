"""Task loading: a prompt string, a prompt file, a seed-format folder, --file and batch lines."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from sandfleet.sandbox.facade import SandboxPaths
from sandfleet.tasks import (
    TaskInputError,
    load_prompt_config,
    prompt_task_id,
    task_from_argument,
    task_from_batch_record,
    task_from_folder,
)

SEED_CONFIG = """\
system_prompt: |-
  You solve problems with code. Inputs are in {input_dir}.
instance_prompt: |-
  <problem>
  {problem_statement}
  </problem>

  Working directory: {working_dir}. Write to {output_dir}/answer.txt.
"""


def seed_folder(root: Path, *, with_config: bool = True, with_input: bool = True) -> Path:
    folder = root / "05_chemical_analysis"
    folder.mkdir()
    (folder / "prompt.txt").write_text("Which option is right?\n\n", encoding="utf-8")
    if with_config:
        (folder / "prompt_config.yaml").write_text(SEED_CONFIG, encoding="utf-8")
    if with_input:
        (folder / "input" / "docs").mkdir(parents=True)
        (folder / "input" / "data.csv").write_text("a,b\n1,2\n", encoding="utf-8")
        (folder / "input" / "docs" / "paper.txt").write_text("text", encoding="utf-8")
    return folder


def test_a_sentence_is_the_prompt_and_gets_a_stable_id() -> None:
    spec = task_from_argument("What is 2 + 2? Write it to the answer file.")

    assert spec.task.prompt == "What is 2 + 2? Write it to the answer file."
    assert spec.task.id == prompt_task_id("What is 2 + 2? Write it to the answer file.")
    assert spec.task.id.startswith("prompt-")
    assert dict(spec.task.files) == {}
    assert spec.task.system_prompt is None and spec.task.instance_prompt is None
    assert spec.paths is None


def test_a_prompt_file_is_read_and_named_after_its_stem(tmp_path: Path) -> None:
    prompt_file = tmp_path / "count_words.txt"
    prompt_file.write_text("Count the words.\n", encoding="utf-8")

    spec = task_from_argument(str(prompt_file))

    assert spec.task.prompt == "Count the words."
    assert spec.task.id == "count_words"


def test_a_missing_path_is_reported_instead_of_becoming_the_prompt(tmp_path: Path) -> None:
    with pytest.raises(TaskInputError, match="no such file or folder"):
        task_from_argument(str(tmp_path / "tasks" / "typo"))
    with pytest.raises(TaskInputError, match="no such file or folder"):
        task_from_argument("prompt.txt")


def test_a_seed_folder_gives_prompt_templates_and_input_files(tmp_path: Path) -> None:
    folder = seed_folder(tmp_path)

    spec = task_from_argument(str(folder))

    task = spec.task
    assert task.id == "05_chemical_analysis"
    assert task.prompt == "Which option is right?"
    assert task.system_prompt == "You solve problems with code. Inputs are in {input_dir}."
    assert task.instance_prompt is not None
    assert "{problem_statement}" in task.instance_prompt
    assert "{working_dir}" in task.instance_prompt and "{output_dir}" in task.instance_prompt
    assert dict(task.files) == {
        "data.csv": folder / "input" / "data.csv",
        "docs/paper.txt": folder / "input" / "docs" / "paper.txt",
    }
    assert spec.paths is None


def test_a_seed_folder_without_config_or_input_is_just_its_prompt(tmp_path: Path) -> None:
    folder = seed_folder(tmp_path, with_config=False, with_input=False)

    task = task_from_folder(folder, task_id="custom").task

    assert task.id == "custom"
    assert task.prompt == "Which option is right?"
    assert task.system_prompt is None and task.instance_prompt is None
    assert dict(task.files) == {}


def test_a_folder_without_prompt_txt_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()

    with pytest.raises(TaskInputError, match=r"has no prompt\.txt"):
        task_from_argument(str(tmp_path / "empty"))


def test_seed_path_keys_in_prompt_config_choose_the_sandbox_layout(tmp_path: Path) -> None:
    config = tmp_path / "prompt_config.yaml"
    config.write_text("working_dir: /work\noutput_dir: /work/out/\n", encoding="utf-8")

    loaded = load_prompt_config(config)

    assert loaded.paths == SandboxPaths(
        working_dir="/work",
        input_dir="/testbed/input",
        output_dir="/work/out",
        answer_file="/work/out/answer.txt",
    )


def test_a_prompt_config_that_is_not_a_mapping_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "prompt_config.yaml"
    config.write_text("- a list\n", encoding="utf-8")

    with pytest.raises(TaskInputError, match="must be a mapping"):
        load_prompt_config(config)


def test_file_flags_add_files_and_folders_to_the_input_directory(tmp_path: Path) -> None:
    folder = seed_folder(tmp_path)
    extra = tmp_path / "extra.json"
    extra.write_text("{}", encoding="utf-8")
    replacement = tmp_path / "data.csv"
    replacement.write_text("replaced", encoding="utf-8")
    docs = tmp_path / "refs"
    (docs / "deep").mkdir(parents=True)
    (docs / "deep" / "r.md").write_text("r", encoding="utf-8")

    spec = task_from_argument(str(folder), extra_files=[extra, replacement, docs])

    assert dict(spec.task.files) == {
        "data.csv": replacement,
        "docs/paper.txt": folder / "input" / "docs" / "paper.txt",
        "extra.json": extra,
        "refs/deep/r.md": docs / "deep" / "r.md",
    }


def test_a_missing_file_flag_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TaskInputError, match="input file not found"):
        task_from_argument("Summarise it.", extra_files=[tmp_path / "nope.csv"])


def test_a_batch_line_with_a_prompt_and_inline_path_and_base64_files(tmp_path: Path) -> None:
    (tmp_path / "local.txt").write_text("from disk", encoding="utf-8")
    record = {
        "id": "t1",
        "prompt": "Solve it.",
        "files": {
            "notes.txt": "inline text",
            "local.txt": {"path": "local.txt"},
            "blob.bin": {"base64": base64.b64encode(b"\x00\x01").decode()},
        },
        "instance_prompt": "Task: {problem_statement}",
    }

    task = task_from_batch_record(record, base_dir=tmp_path).task

    assert task.id == "t1"
    assert task.prompt == "Solve it."
    assert task.instance_prompt == "Task: {problem_statement}"
    assert dict(task.files) == {
        "notes.txt": b"inline text",
        "local.txt": tmp_path / "local.txt",
        "blob.bin": b"\x00\x01",
    }


def test_a_batch_line_with_a_task_dir_uses_the_folder_relative_to_the_batch_file(
    tmp_path: Path,
) -> None:
    folder = seed_folder(tmp_path)

    from_folder = task_from_batch_record({"id": "a", "task_dir": folder.name}, base_dir=tmp_path)
    overridden = task_from_batch_record(
        {"id": "b", "task_dir": folder.name, "prompt": "Another question."}, base_dir=tmp_path
    )

    assert from_folder.task.id == "a"
    assert from_folder.task.prompt == "Which option is right?"
    assert "data.csv" in from_folder.task.files
    assert overridden.task.prompt == "Another question."
    assert overridden.task.system_prompt == from_folder.task.system_prompt


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"prompt": "x"}, "non-empty string id"),
        ({"id": "a"}, "needs a prompt or a task_dir"),
        ({"id": "a", "task_dir": "missing"}, "task folder not found"),
        ({"id": "a", "prompt": "x", "files": ["a"]}, "files must be an object"),
        ({"id": "a", "prompt": "x", "files": {"f": {"path": "nope"}}}, "not found"),
        ({"id": "a", "prompt": "x", "files": {"f": {"base64": "***"}}}, "bad base64"),
        ({"id": "a", "prompt": "x", "files": {"f": 3}}, "expected text"),
        ({"id": "a", "prompt": 7}, "prompt must be a string"),
    ],
)
def test_bad_batch_lines_are_reported(
    tmp_path: Path, record: dict[str, object], message: str
) -> None:
    with pytest.raises(TaskInputError, match=message):
        task_from_batch_record(record, base_dir=tmp_path)


def test_a_batch_lines_template_with_an_unknown_placeholder_carries_a_notice(
    tmp_path: Path,
) -> None:
    record = {"id": "t1", "prompt": "p", "system_prompt": "Files are in {input_folder}."}

    spec = task_from_batch_record(record, base_dir=tmp_path)

    assert len(spec.notices) == 1
    assert spec.notices[0].startswith(
        "task t1: system_prompt: the placeholder {input_folder} is not filled in; "
        "did you mean input_dir?"
    )


def test_a_prompt_config_with_only_known_keys_and_placeholders_has_no_notices(
    tmp_path: Path,
) -> None:
    config = tmp_path / "prompt_config.yaml"
    config.write_text("system_prompt: 'In {working_dir}; {command_docs}'\noutput_dir: /o\n")

    assert load_prompt_config(config).notices == ()
