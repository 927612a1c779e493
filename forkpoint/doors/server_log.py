"""The gateway's server log: one line per malformed request.

aiohttp logs every request it cannot parse (a bad request line, header or chunk) with its
traceback, several lines each; a fuzzer or a port scanner then floods the log. A request the
agent got wrong is said in one line, with what was wrong; anything else keeps its traceback.
"""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import HttpProcessingError

__all__ = ["SERVER_LOG"]


class _OneLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            # the message quotes the offending bytes as a repr: no control characters
            what = " ".join(str(error.message).split())
            record.msg = f"{record.getMessage()}: {error.code} {what}"
            record.args, record.exc_info, record.exc_text = (), None, None
        return True


SERVER_LOG = logging.getLogger("forkpoint.doors.server")
SERVER_LOG.addFilter(_OneLine())
