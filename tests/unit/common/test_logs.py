from __future__ import annotations

import json
import logging

from services.common.logs import JsonFormatter, LogfmtFormatter


def make_record(msg: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("services.broker.app", logging.INFO, __file__, 1, msg, None, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_logfmt_quotes_values_that_need_it_and_keeps_extra_fields() -> None:
    record = make_record("broker started", broker="broker-a", note="two words")
    line = LogfmtFormatter("broker").format(record)
    assert " level=info service=broker logger=services.broker.app " in line
    assert 'msg="broker started" broker=broker-a note="two words"' in line


def test_json_has_the_same_fields() -> None:
    doc = json.loads(JsonFormatter("namesrv").format(make_record("expired", broker_id=1)))
    assert (doc["service"], doc["msg"], doc["broker_id"], doc["level"]) == ("namesrv", "expired", 1, "info")


def test_exceptions_are_included() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = make_record("failed")
        record.exc_info = sys.exc_info()
    assert "ValueError: boom" in json.loads(JsonFormatter("x").format(record))["exc"]
