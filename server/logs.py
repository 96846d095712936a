"""Logging for `meshplan serve` (the standard `logging`): text lines, or JSON objects one per line
(`--log-format json`, python-json-logger's formatter).

A call's line carries its fields (method, request_id, caller, status, ...) in `record.fields`;
the text format prints them as key=value, the JSON format as keys of the object.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from pythonjsonlogger import json as jsonlogger

FIELDS = "fields"  # the LogRecord attribute holding a call's fields


def _text_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    return json.dumps(text) if (" " in text or "=" in text or '"' in text) else text


class TextFormatter(logging.Formatter):
    """`2025-01-01 12:00:00,000 INFO meshplan.server method=Plan request_id=... status=OK`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802  (logging's name)
        line = super().formatMessage(record)
        fields: dict[str, Any] = getattr(record, FIELDS, None) or {}
        shown = record.getMessage()
        extra = " ".join(f"{k}={_text_value(v)}" for k, v in fields.items() if f"{k}=" not in shown)
        return f"{line} {extra}".rstrip() if extra else line


class JsonFormatter(jsonlogger.JsonFormatter):
    """One JSON object per line (python-json-logger): time, level, logger, message, the call's
    fields as keys of their own, and the exception (type and message; the traceback too at DEBUG
    level) if any."""

    def __init__(self) -> None:
        super().__init__("{message}", style="{", json_default=str, json_ensure_ascii=True)

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        message_dict.pop("exc_info", None)  # said below, the traceback at DEBUG only
        log_data["time"] = (
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z"
        )
        log_data["level"] = record.levelname
        log_data["logger"] = record.name
        super().add_fields(log_data, record, message_dict)  # the message, and extra= keys
        log_data.update(log_data.pop(FIELDS, None) or {})
        if record.exc_info and record.exc_info[1] is not None:
            err = record.exc_info[1]
            log_data["exception"] = f"{type(err).__name__}: {err}"
            if logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
                log_data["traceback"] = self.formatException(record.exc_info)


def setup_logging(level: str, fmt: str) -> None:
    """Configure the root logger (once, from `meshplan serve`)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
