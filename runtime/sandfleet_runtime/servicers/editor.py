"""The EditorService servicer: str_replace_editor's commands on the file editor."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable

from sandfleet_proto.runtime.v1 import (
    editor_service_pb2 as editor_pb,
)
from sandfleet_proto.runtime.v1 import (
    editor_service_pb2_grpc as editor_grpc,
)

from ..editor.file_editor import FileEditor
from ..errors import (
    RuntimeToolError,
)
from ..stats import ActivityClock
from .calls import Context, abort, domain_error


class EditorServicer(editor_grpc.EditorServiceServicer):
    """Editor calls run on one worker thread: a 50 MB file takes ~1 s to rewrite, which must
    not stall other sessions' RPCs, and one thread keeps the (non-thread-safe) editor serial."""

    def __init__(self, editor: FileEditor, activity: ActivityClock) -> None:
        self._editor = editor
        self._activity = activity
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None

    async def _edit(self, context: Context, work: Callable[[], str]) -> str:
        self._activity.touch()
        if self._worker is None:  # created on first use: an idle sandbox keeps no extra thread
            self._worker = concurrent.futures.ThreadPoolExecutor(1, "editor")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._worker, work)
        except (RuntimeToolError, ValueError, OSError) as exc:
            await abort(context, domain_error(exc))

    async def clear_history(self) -> None:
        """Forgets the undo history, on the editor's thread (never during an edit)."""
        if self._worker is None:
            self._editor.clear_history()
            return
        await asyncio.get_running_loop().run_in_executor(self._worker, self._editor.clear_history)

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)

    async def View(
        self, request: editor_pb.ViewRequest, context: Context
    ) -> editor_pb.ViewResponse:
        view_range = list(request.view_range) or None
        output = await self._edit(context, lambda: self._editor.view(request.path, view_range))
        return editor_pb.ViewResponse(output=output)

    async def Create(
        self, request: editor_pb.CreateRequest, context: Context
    ) -> editor_pb.CreateResponse:
        output = await self._edit(
            context, lambda: self._editor.create(request.path, request.file_text)
        )
        return editor_pb.CreateResponse(output=output)

    async def StrReplace(
        self, request: editor_pb.StrReplaceRequest, context: Context
    ) -> editor_pb.StrReplaceResponse:
        new_str = request.new_str if request.HasField("new_str") else None
        output = await self._edit(
            context, lambda: self._editor.str_replace(request.path, request.old_str, new_str)
        )
        return editor_pb.StrReplaceResponse(output=output)

    async def Insert(
        self, request: editor_pb.InsertRequest, context: Context
    ) -> editor_pb.InsertResponse:
        output = await self._edit(
            context,
            lambda: self._editor.insert(request.path, request.insert_line, request.new_str),
        )
        return editor_pb.InsertResponse(output=output)

    async def UndoEdit(
        self, request: editor_pb.UndoEditRequest, context: Context
    ) -> editor_pb.UndoEditResponse:
        output = await self._edit(context, lambda: self._editor.undo_edit(request.path))
        return editor_pb.UndoEditResponse(output=output)
