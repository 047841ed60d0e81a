"""SyncSandboxEnvBatch: SandboxEnvBatch for trainers without asyncio (a blocking facade).

The batch lives on an event loop in a worker thread (anyio's blocking portal, as
sandfleet.sandbox.sync does for SyncSandbox); every method blocks until that loop has done it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from sandfleet.agent.config import Task
from sandfleet.rl.batch import Call, ResetFailure, SandboxEnvBatch
from sandfleet.rl.episode import Observation, RewardFn, StepResult
from sandfleet.sandbox.sync import EventLoopThread

T = TypeVar("T")


class SyncSandboxEnvBatch:
    """`with SyncSandboxEnvBatch.local(8) as batch: batch.reset_all(tasks); batch.step(calls)`.
    Close it (or leave the `with`): it keeps an event-loop thread until then."""

    def __init__(self, loop: EventLoopThread) -> None:
        self._loop = loop
        self.batch: SandboxEnvBatch | None = None
        """The async batch underneath (use it only on this object's event loop)."""

    @classmethod
    def open(
        cls, opener: Callable[..., Awaitable[SandboxEnvBatch]], *args: Any, **kwargs: Any
    ) -> Self:
        """A batch from any async constructor (SandboxEnvBatch.local, .on_cluster, ...)."""
        sync = cls(EventLoopThread())
        try:
            sync.batch = sync._call(opener, *args, **kwargs)
        except BaseException:
            sync._loop.leave()
            raise
        return sync

    @classmethod
    def local(cls, count: int, *args: Any, **kwargs: Any) -> Self:
        """`count` local sandboxes (SandboxEnvBatch.local's arguments)."""
        return cls.open(SandboxEnvBatch.local, count, *args, **kwargs)

    @classmethod
    def on_cluster(cls, count: int, *args: Any, **kwargs: Any) -> Self:
        """`count` sandboxes from one gateway claim (SandboxEnvBatch.on_cluster's arguments)."""
        return cls.open(SandboxEnvBatch.on_cluster, count, *args, **kwargs)

    def _call(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        return self._loop.call(func, *args, **kwargs)

    def _open_batch(self) -> SandboxEnvBatch:
        if self.batch is None:
            raise RuntimeError("the batch is closed")
        return self.batch

    def reset_all(
        self, tasks: Sequence[Task], rewards: Sequence[RewardFn | None] | None = None
    ) -> list[Observation | ResetFailure]:
        return self._call(self._open_batch().reset_all, tasks, rewards)

    def step(self, calls: Sequence[Call | None]) -> list[StepResult | None]:
        return self._call(self._open_batch().step, calls)

    def close(self) -> None:
        """Close every sandbox and stop the event-loop thread; a second call does nothing."""
        batch, self.batch = self.batch, None
        try:
            if batch is not None:
                self._call(batch.close)
        finally:
            self._loop.leave()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
