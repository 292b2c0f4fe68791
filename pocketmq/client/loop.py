"""The event loop behind the synchronous faces (:class:`~pocketmq.Producer`,
:class:`~pocketmq.Consumer`, :class:`~pocketmq.Admin`): one daemon thread per process running
an asyncio loop, started on first use and shared by every synchronous client."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def _run(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    loop.run_forever()


def background_loop() -> asyncio.AbstractEventLoop:
    """The shared loop, started if needed."""
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            ready = threading.Event()
            thread = threading.Thread(target=_run, args=(loop, ready), name="pocketmq-client-loop",
                                      daemon=True)
            thread.start()
            ready.wait()
            _loop, _thread = loop, thread
        return _loop


def in_loop_thread() -> bool:
    return _thread is not None and threading.current_thread() is _thread


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the shared loop and wait for its result (from any other thread)."""
    if in_loop_thread():
        coro.close()
        raise RuntimeError("a synchronous PocketMQ call was made from the client's own event loop "
                           "thread (inside an async callback); use the Async* classes there")
    future = asyncio.run_coroutine_threadsafe(coro, background_loop())
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"no result within {timeout:g}s") from None
    except KeyboardInterrupt:
        future.cancel()
        raise


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule ``coro`` on the shared loop; returns a thread-safe future."""
    return asyncio.run_coroutine_threadsafe(coro, background_loop())
