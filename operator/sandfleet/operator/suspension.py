"""Suspend and resume on a cluster, the parts that talk to the runtime and the snapshot store.

Suspend reads each bash session's working directory and exported environment (every session
the runtime has open, interrupting its foreground command first), then streams one archive
into the store: a state member (the shells' state, the extra roots the archive holds, the
session's runtime token) followed by the runtime's SnapshotTree of the working tree, HOME,
/tmp and /var/tmp (snapshots.archive). The store verifies size and checksum before `put`
returns; only then does the session worker give the pod back.

Resume reads the state member first (a missing or corrupt snapshot fails before any pod is
taken), binds a sandbox, streams the rest into RestoreTree (the same extra roots) and
replays the shells' state, before the session reports Ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from sandfleet.api import Reason
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.clients.runtime.results import FileEntry
from sandfleet.errors import SandfleetError, SnapshotCorruptError, SnapshotTooLargeError
from sandfleet.fleet.resources import ObjectRef
from sandfleet.logs import get_logger
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.laps import Laps
from sandfleet.operator.sandbox_lease import PendingBind
from sandfleet.snapshots.archive import split_state, with_state
from sandfleet.snapshots.shell_state import capture, live_sessions, reestablish
from sandfleet.snapshots.store import (
    SnapshotKey,
    SnapshotStore,
    SnapshotStoreUnavailableError,
    StoredSnapshot,
)

log = get_logger(__name__)

EXTRA_ROOTS = ("~", "/tmp", "/var/tmp")
"""What a sandbox can write outside its working tree and a user expects back: HOME (`pip
install --user`, caches, dotfiles) and the scratch directories. The runtime leaves out the
ones that are missing, not writable, or hold the working tree (docs/suspend.md)."""
RPC_TIMEOUT_S = 120.0
BIGGEST_PATHS = 5


class TransitionError(SandfleetError):
    """A suspend or resume that did not happen: the condition's reason, the metric's label."""

    def __init__(self, reason: Reason, metric: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.metric = metric


def snapshot_key(session: ObjectRef) -> SnapshotKey:
    return SnapshotKey(session.namespace, session.name, session.uid)


def _store(ctx: OperatorContext, step: str) -> SnapshotStore:
    if ctx.snapshots is None:
        raise TransitionError(
            Reason.SUSPEND_NOT_SUPPORTED,
            "not_supported",
            f"cannot {step}: the operator has no snapshot store "
            "(SANDFLEET_OPERATOR_SNAPSHOT_DIR, the chart's snapshots values)",
        )
    return ctx.snapshots


async def save_snapshot(
    ctx: OperatorContext, session: ObjectRef, address: str, token: str, workdir: str
) -> StoredSnapshot:
    """The session's shells' state and working tree, stored and verified; raises
    TransitionError (the sandbox is untouched but for interrupted foreground commands)."""
    store = _store(ctx, "suspend")
    limit = ctx.settings.snapshot_limit_bytes
    client = RuntimeClient(address, token, rpc_timeout_s=RPC_TIMEOUT_S)
    roots: tuple[str, ...] = ()
    try:
        shells = await capture(client, await live_sessions(client))
        roots, tree = await client.snapshot_with_roots(EXTRA_ROOTS)
        state = {"token": token, "shells": shells, "extra_roots": list(roots)}
        try:
            return await store.put(
                snapshot_key(session), with_state(state, tree), limit_bytes=limit
            )
        finally:
            await tree.aclose()
    except SnapshotTooLargeError:
        biggest = await _biggest_paths(client, (workdir, *roots))
        raise TransitionError(
            Reason.SNAPSHOT_TOO_LARGE,
            "too_large",
            f"the snapshot would exceed the limit of {limit} bytes "
            f"(SANDFLEET_OPERATOR_SNAPSHOT_LIMIT_BYTES); the biggest paths: {biggest}; "
            "the sandbox keeps running",
        ) from None
    except (SnapshotStoreUnavailableError, OSError) as exc:
        # OSError: a store's own clean-up failing too (the volume store's, on a broken path).
        raise TransitionError(
            Reason.SNAPSHOT_STORE_UNAVAILABLE,
            "store_unavailable",
            f"{exc}; the sandbox keeps running",
        ) from None
    except SandfleetError as exc:
        raise TransitionError(
            Reason.SUSPEND_FAILED, "runtime", f"{exc}; the sandbox keeps running"
        ) from None
    finally:
        await client.close()


async def _biggest_paths(client: RuntimeClient, trees: Sequence[str]) -> str:
    """The largest files below the saved trees, for the too-large message (best effort)."""
    entries: list[FileEntry] = []
    unlisted: list[str] = []
    for tree in trees:
        try:
            entries += await client.list_files(tree, max_depth=16)
        except SandfleetError as exc:
            unlisted.append(f"{tree}: {exc}")
    if unlisted and not entries:
        return f"(could not list them: {'; '.join(unlisted)})"
    files = sorted((e for e in entries if not e.is_dir), key=lambda e: e.size, reverse=True)
    return ", ".join(f"{e.path} ({e.size} bytes)" for e in files[:BIGGEST_PATHS]) or "(none)"


def stored_of(session: ObjectRef, snapshot: Mapping[str, Any]) -> StoredSnapshot:
    """The StoredSnapshot status.snapshot describes (what a read is checked against)."""
    when = dt.datetime.fromisoformat(str(snapshot["suspendedTime"]))
    return StoredSnapshot(
        snapshot_key(session), int(snapshot["sizeBytes"]), str(snapshot["sha256"]), when.timestamp()
    )


async def saved_state(
    ctx: OperatorContext, session: ObjectRef, snapshot: Mapping[str, Any]
) -> dict[str, Any]:
    """The snapshot's state member (token, shells), read before any sandbox is taken.
    Raises TransitionError (missing, corrupt, store down)."""
    store = _store(ctx, "resume")
    chunks = store.read(snapshot_key(session), stored_of(session, snapshot))
    try:
        state, _ = await split_state(chunks)
    except SnapshotCorruptError as exc:
        raise TransitionError(Reason.SNAPSHOT_CORRUPT, "corrupt", str(exc)) from None
    except SnapshotStoreUnavailableError as exc:
        raise TransitionError(Reason.RESUME_FAILED, "store_unavailable", str(exc)) from None
    finally:
        await _close(chunks)
    if not isinstance(state.get("token"), str) or not isinstance(state.get("shells"), dict):
        raise TransitionError(
            Reason.SNAPSHOT_CORRUPT, "corrupt", "the snapshot's state lacks its token or shells"
        )
    roots = state.setdefault("extra_roots", [])  # none in a snapshot from before them
    if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
        raise TransitionError(
            Reason.SNAPSHOT_CORRUPT, "corrupt", "the snapshot's extra roots are not paths"
        )
    return state


async def restore_snapshot(
    ctx: OperatorContext,
    session: ObjectRef,
    snapshot: Mapping[str, Any],
    address: str,
    token: str,
    *,
    pending: PendingBind | None,
) -> None:
    """The working tree and the shells' state back in the sandbox at `address`. With
    `pending` the tree streams in while the bind runs (with the token the runtime holds
    until then); the shells, which the bind would close, are replayed once it is done."""
    client = RuntimeClient(
        address, token if pending is None else pending.token_now, rpc_timeout_s=RPC_TIMEOUT_S
    )
    laps = Laps()
    streaming = pending.streaming.set if pending is not None else None
    try:
        try:
            state = await _restore_tree(ctx, session, snapshot, client, streaming)
        except _RefusedTokenError:
            if pending is None:
                raise
            await pending.bound  # the bind won the race: the session's token it is
            client.rotate_token(token)
            state = await _restore_tree(ctx, session, snapshot, client, None)
        laps.lap("tree")
        if pending is not None:
            await pending.bound
            client.rotate_token(token)
            laps.lap("bound")
        await reestablish(client, state["shells"], ("", ""))
        laps.lap("shells")
        log.info("snapshot_restored", session=f"{session.namespace}/{session.name}",
                 steps_ms=laps.ms)  # fmt: skip
    except _RefusedTokenError as exc:
        raise TransitionError(Reason.RESUME_FAILED, "runtime", str(exc.__cause__)) from None
    finally:
        await client.close()


class _RefusedTokenError(SandfleetError):
    """The runtime refused the call's token (UNAUTHENTICATED); the cause says how."""


async def _restore_tree(
    ctx: OperatorContext,
    session: ObjectRef,
    snapshot: Mapping[str, Any],
    client: RuntimeClient,
    streaming: Callable[[], None] | None,
) -> dict[str, Any]:
    """RestoreTree from the store's read of the snapshot; returns the state member.
    `streaming` is called once the call sends the archive (and at its end, at the latest).
    TransitionError (corrupt, the runtime failed) or _RefusedTokenError."""
    store = _store(ctx, "resume")
    chunks = store.read(snapshot_key(session), stored_of(session, snapshot))
    corrupt: list[SnapshotCorruptError] = []

    async def tree(rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for chunk in rest:
                if streaming is not None:
                    streaming()
                yield chunk
        except SnapshotCorruptError as exc:  # the checksum is known at the end of the read
            corrupt.append(exc)
            raise

    try:
        state, rest = await split_state(chunks)
        await client.restore(tree(rest), extra_roots=state.get("extra_roots") or ())
        if streaming is not None:
            streaming()
        return state
    except SnapshotCorruptError as exc:
        raise TransitionError(Reason.SNAPSHOT_CORRUPT, "corrupt", str(exc)) from None
    except asyncio.CancelledError:
        # grpc cancels the upload when its request stream raises (so the runtime never swaps
        # in a tree whose checksum failed) and reports that as a cancellation of ours.
        if corrupt and not _being_cancelled():
            raise TransitionError(Reason.SNAPSHOT_CORRUPT, "corrupt", str(corrupt[0])) from None
        raise
    except SandfleetError as exc:
        if corrupt:
            raise TransitionError(Reason.SNAPSHOT_CORRUPT, "corrupt", str(corrupt[0])) from None
        if "UNAUTHENTICATED" in str(exc):  # calls.translate names the status
            raise _RefusedTokenError from exc
        raise TransitionError(Reason.RESUME_FAILED, "runtime", str(exc)) from None
    finally:
        await _close(chunks)


async def drop_snapshot(ctx: OperatorContext, session: ObjectRef) -> None:
    """Delete the session's snapshot (resumed, or the session is gone); failures are logged:
    the orphan is the store's to sweep, never a reason to keep a session."""
    if ctx.snapshots is None:
        return
    try:
        await ctx.snapshots.delete(snapshot_key(session))
    except SandfleetError as exc:
        log.warning("snapshot_delete_failed", session=f"{session.namespace}/{session.name}",
                    error=str(exc))  # fmt: skip


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _close(chunks: AsyncIterator[bytes]) -> None:
    close = getattr(chunks, "aclose", None)
    if close is None:
        return
    # RuntimeError "already running": a refused call's request stream is still being read by
    # grpc's sending task, which is cancelled with the call; that ends the read (and closes
    # the store's handle) on its way out.
    with contextlib.suppress(RuntimeError):
        await close()
