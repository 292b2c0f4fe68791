"""The web console next to the NameServer (``consolePort``).

The console is a client application (:mod:`pocketmq.console`, built on the admin client, as
RocketMQ Dashboard is built on the admin API), so the NameServer does not import it: it runs
``python -m pocketmq.console`` as a child process pointed at this NameServer's gRPC port,
restarts it (after a pause) if it exits on its own, and stops it with the NameServer. On Linux
the child dies with the NameServer even when that is killed. The child's log lines
(``LEVEL logger: message``) are read from its stderr and logged again through the NameServer's
structured logging, so the NameServer's output stays one format.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Mapping

from services.common.lifecycle import die_with_parent

log = logging.getLogger(__name__)

#: Pause before starting a console that exited on its own again.
RESTART_DELAY_S = 2.0

#: How the child formats its log lines (``python -m pocketmq.console --log-format``).
CHILD_LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def relog(line: str, pid: int) -> None:
    """Log one line of the child's stderr at its level (a line that is not a log line, e.g. a
    traceback's, at WARNING) through this process's structured logging."""
    level_name, _, rest = line.partition(" ")
    level = logging.getLevelName(level_name)
    name, sep, message = rest.partition(": ")
    if not isinstance(level, int) or not sep or " " in name:
        level, name, message = logging.WARNING, "pocketmq.console", line
    logging.getLogger(name).log(level, message, extra={"child": "console", "pid": pid})


class ConsoleProcess:
    def __init__(self, namesrv_addr: str, listen: str, env: Mapping[str, str] | None = None) -> None:
        """``env``: set in the child's environment over the NameServer's own (e.g. the
        ``POCKETMQ_TLS*`` settings its admin client connects with)."""
        self.namesrv_addr = namesrv_addr
        self.env = dict(env or {})
        self.listen = listen
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def argv(self) -> list[str]:
        return [sys.executable, "-m", "pocketmq.console", "--namesrv", self.namesrv_addr,
                "--listen", self.listen, "--log-format", CHILD_LOG_FORMAT]

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="namesrv-console")

    async def _run(self) -> None:
        while not self._stopping:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv, preexec_fn=die_with_parent(), env={**os.environ, **self.env},
                stderr=asyncio.subprocess.PIPE)
            log.info("console started", extra={"listen": self.listen, "pid": self._proc.pid})
            await self._relog_stderr(self._proc)
            code = await self._proc.wait()
            if self._stopping:
                return
            log.error("console exited; starting it again", extra={"returncode": code,
                                                                  "retry_s": RESTART_DELAY_S})
            await asyncio.sleep(RESTART_DELAY_S)

    @staticmethod
    async def _relog_stderr(proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                relog(line, proc.pid)

    async def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except TimeoutError:
                log.warning("console did not stop in time; killing it", extra={"pid": proc.pid})
                proc.kill()
                await proc.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
