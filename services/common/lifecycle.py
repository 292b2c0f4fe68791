"""Process lifecycle: one asyncio event loop, graceful stop on SIGTERM/SIGINT.

Kubernetes sends SIGTERM and waits ``terminationGracePeriodSeconds``; services therefore stop
accepting work, finish in-flight requests, flush, unregister, and exit 0. A second signal while
shutting down exits at once.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable

from pocketmq.wire.malloc import keep_freed_memory
from services.common.ports import ListenError

log = logging.getLogger(__name__)

ServiceMain = Callable[[asyncio.Event], Awaitable[None]]


def run_service(main: ServiceMain, on_second_signal: Callable[[], None] | None = None) -> int:
    """Run ``main(stop_event)`` on a fresh event loop; ``stop_event`` is set by SIGTERM/SIGINT.

    ``main`` starts its servers, awaits ``stop_event.wait()``, then shuts down gracefully.
    ``on_second_signal`` runs (on the loop's thread) before the immediate exit a second signal
    causes. A port that cannot be bound is one error line (its traceback only at DEBUG level).
    Returns the process exit code.
    """
    keep_freed_memory()  # (glibc thresholds: process-wide, for every thread's arena)

    async def runner() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def on_signal(signum: int) -> None:
            if stop.is_set():
                log.warning("second signal, exiting immediately", extra={"signal": signum})
                try:
                    if on_second_signal is not None:
                        on_second_signal()
                finally:
                    os._exit(1)
            log.info("shutdown requested", extra={"signal": signal.Signals(signum).name})
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        await main(stop)

    try:
        asyncio.run(runner())
    except ListenError as exc:
        extra = {"listener": exc.listener} if exc.listener else {}
        log.error(str(exc), extra=extra, exc_info=log.isEnabledFor(logging.DEBUG))
        return 1
    except Exception:
        log.exception("fatal error")
        return 1
    return 0


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking the kernel to SIGKILL the child when this process dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``); ``None`` where that is not available."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec
