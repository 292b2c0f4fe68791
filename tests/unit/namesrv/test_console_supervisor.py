"""The NameServer's console child: its log lines come out through the NameServer's logging."""

from __future__ import annotations

import asyncio
import logging

import pytest

from services.namesrv.console import ConsoleProcess, relog


def test_a_child_log_line_keeps_its_level_and_logger(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        relog("ERROR pocketmq.console: cannot serve the console on 127.0.0.1:1: denied", 42)
        relog("Traceback (most recent call last):", 42)
    first, second = caplog.records
    assert (first.levelno, first.name, first.getMessage()) == (
        logging.ERROR, "pocketmq.console", "cannot serve the console on 127.0.0.1:1: denied")
    assert first.child == "console" and first.pid == 42  # type: ignore[attr-defined]
    assert (second.levelno, second.name) == (logging.WARNING, "pocketmq.console")
    assert second.getMessage() == "Traceback (most recent call last):"


@pytest.mark.asyncio
async def test_the_running_child_is_logged_through_the_parent(caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, "child", None) == "console" and record.getMessage() == "console started":
                started.set()

    watch = Watch()
    logging.getLogger().addHandler(watch)
    console = ConsoleProcess("127.0.0.1:1", "127.0.0.1:0")
    try:
        with caplog.at_level(logging.INFO):
            console.start()
            await asyncio.wait_for(started.wait(), 30)
    finally:
        await console.stop()
        logging.getLogger().removeHandler(watch)
