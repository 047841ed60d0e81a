"""llama.cpp's OpenAI-compatible server for one GGUF, run with the model cache's Python.

Not imported by the tests: `model_server.py` starts it as `<cache venv>/bin/python serve.py
... --exit-with-parent`, since xllamacpp lives only in that venv. It prints `listening <url>`
once the model is loaded and the HTTP server is up, then serves until SIGTERM or SIGINT
(Ctrl-C).

Also the README's way to try Sandfleet with a real model on a laptop (no GPU), standalone:

    bash tests/model/setup.sh            # the venv with xllamacpp and the GGUF, once (~1 GB)
    ~/.cache/sandfleet/model/venv/bin/python tests/model/serve.py --port 8080 \
        --model ~/.cache/sandfleet/model/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    sandfleet run "..." --model qwen2.5-coder-1.5b-instruct \
        --base-url http://127.0.0.1:8080/v1 --temperature 0 --concurrency 1
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path

import xllamacpp  # type: ignore[import-not-found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument(
        "--chat-template",
        type=Path,
        default=Path(__file__).with_name("chat_template.jinja"),
        help="a Jinja file (default: the corrected Qwen2.5 template beside this script)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--ctx-size", type=int, default=8192)
    parser.add_argument(
        "--alias", default="qwen2.5-coder-1.5b-instruct", help="the model name to ask for"
    )
    parser.add_argument(
        "--parallel", type=int, default=1,
        help="slots: requests served at once, each with ctx-size/parallel tokens (default 1: "
        "run sandfleet with --concurrency 1 against it)",
    )  # fmt: skip
    parser.add_argument(
        "--slot-save-path", type=Path,
        help="a folder for the /slots/0?action=save|restore files (a slot's prompt cache)",
    )  # fmt: skip
    parser.add_argument(
        "--exit-with-parent", action="store_true",
        help="stop when the process that started this one exits (the tests' starter)",
    )  # fmt: skip
    args = parser.parse_args()

    params = xllamacpp.CommonParams()
    params.model.path = str(args.model)
    params.model_alias = args.alias
    params.hostname = args.host
    params.port = args.port
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel  # default one slot: the whole context for one conversation
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.use_jinja = True  # the template below, and llama.cpp's tool-call parsing with it
    params.chat_template = args.chat_template.read_text()
    if args.slot_save_path is not None:
        # llama.cpp joins this and the request's file name without a separator.
        params.slot_save_path = f"{args.slot_save_path}{os.sep}"

    stop = threading.Event()
    if args.exit_with_parent:
        # A starter killed without cleanup (SIGKILL, a test timeout) must not leave 2 GB behind.
        watch = threading.Thread(target=_stop_when_orphaned, args=(os.getppid(), stop), daemon=True)
        watch.start()
    server = xllamacpp.Server(params)  # loads the model and starts listening
    # After the server: llama.cpp installs its own SIGTERM/SIGINT handlers as it starts, which
    # left our stop unset, so every stop waited out the starter's 15 s before SIGKILL.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"listening {server.listening_address}", flush=True)
    stop.wait()
    # The embedded server's threads never end on their own, so a normal interpreter exit
    # would hang; nothing is left to flush (the log goes to stderr, unbuffered).
    os._exit(0)


def _stop_when_orphaned(parent: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        if os.getppid() != parent:
            stop.set()


if __name__ == "__main__":
    main()
