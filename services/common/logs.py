"""Structured logging: one line per event, ``logfmt`` (default) or JSON.

Extra fields are passed the standard way, ``log.info("broker registered", extra={"broker": b})``,
and appear as ``key=value`` pairs. ``POCKETMQ_LOG_FORMAT=json`` and ``POCKETMQ_LOG_LEVEL=DEBUG``
switch format and level without code changes.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def _logfmt_value(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\n\t'):
        return json.dumps(text, ensure_ascii=False)
    return text


class LogfmtFormatter(logging.Formatter):
    """``ts=... level=info service=broker logger=... msg="..." key=value ...``"""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def document(self, record: logging.LogRecord) -> dict[str, Any]:
        """The fields of one log line, in order."""
        doc = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return doc

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in self.document(record).items())


class JsonFormatter(LogfmtFormatter):
    """One JSON object per line with the same fields."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(self.document(record), default=str, ensure_ascii=False)


def setup_logging(service: str, level: str | None = None, fmt: str | None = None) -> None:
    """Configure the root logger to write structured lines to stderr."""
    level = (level or os.environ.get("POCKETMQ_LOG_LEVEL", "INFO")).upper()
    fmt = (fmt or os.environ.get("POCKETMQ_LOG_FORMAT", "logfmt")).lower()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service) if fmt == "json" else LogfmtFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("asyncio").setLevel(logging.WARNING)
