"""gRPC servicers: protobuf <-> domain calls, domain errors -> status codes, nothing else.

One module per service of proto/sandfleet_proto/runtime/v1; `calls` holds what they share.
"""

from .bash import BashServicer, command_response
from .editor import EditorServicer
from .files import REFUSED_UPLOAD_DRAIN_BYTES, FileServicer
from .system import SystemServicer

__all__ = [
    "REFUSED_UPLOAD_DRAIN_BYTES",
    "BashServicer",
    "EditorServicer",
    "FileServicer",
    "SystemServicer",
    "command_response",
]
