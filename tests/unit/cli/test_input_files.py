"""A task's input files become inline text for spec.files, or a clear refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfleet.cli.input_files import read_text_inputs
from sandfleet.fleet.manifests import ManifestError


def test_text_files_and_contents_are_read_with_the_local_modes(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o750)

    inputs = read_text_inputs({"run.sh": script, "notes.txt": "café\n".encode()})

    assert inputs.contents == {"run.sh": "#!/bin/sh\necho hi\n", "notes.txt": "café\n"}
    assert inputs.modes == {"run.sh": 0o750}


def test_binary_inputs_are_refused_by_name(tmp_path: Path) -> None:
    image = tmp_path / "plot.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")

    with pytest.raises(ManifestError, match=r"input file plot\.png is not UTF-8 text"):
        read_text_inputs({"plot.png": image})


def test_inputs_over_the_budget_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    big.write_text("x" * 600)

    with pytest.raises(ManifestError, match="more than 1000 bytes"):
        read_text_inputs({"a": b"y" * 500, "big.csv": big}, max_total_bytes=1000)
    with pytest.raises(ManifestError, match="more than 1000 bytes"):
        read_text_inputs({"a": b"y" * 600, "b": b"z" * 600}, max_total_bytes=1000)


def test_an_unreadable_input_names_the_local_path(tmp_path: Path) -> None:
    missing = tmp_path / "gone.txt"

    with pytest.raises(ManifestError, match=r"cannot read the input file .*gone\.txt"):
        read_text_inputs({"gone.txt": missing})
