"""The one way tests build an `Exchange` of plain data: sensible defaults, override any field.

exchange(step=2, status=500)              # a chat completion request and its JSON answer
llm(3, model="gpt-4o-mini", calls=(...))  # with a model call's summary
tool(4, route="/tools/orders/A1")         # with a tool call's summary
"""

from __future__ import annotations

from typing import Any

from forkpoint.models import Exchange, Kind, Summary, ToolCall, Usage

JSON = (("content-type", "application/json"),)


def exchange(**fields: Any) -> Exchange:
    defaults: dict[str, Any] = {
        "run_id": "r",
        "step": 0,
        "method": "POST",
        "route": "/v1/chat/completions",
        "request_headers": JSON,
        "request_body": b'{"model":"gpt-4o"}',
        "fingerprint": "",
        "status": 200,
        "response_headers": JSON,
        "response_body": b'{"ok":1}',
    }
    return Exchange(**{**defaults, **fields})


def llm(
    step: int = 0,
    *,
    model: str | None = "gpt-4o",
    usage: Usage | None = None,
    calls: tuple[ToolCall, ...] = (),
    text: str | None = None,
    dialect: str = "openai_chat",
    **fields: Any,
) -> Exchange:
    summary = Summary(Kind.LLM, dialect, model, usage, calls, text=text)
    return exchange(step=step, summary=summary, **fields)


def tool(
    step: int = 0, *, route: str = "/tools/lookup", method: str = "GET", **fields: Any
) -> Exchange:
    fields.setdefault("request_body", b"")
    return exchange(
        step=step, route=route, method=method, summary=Summary(Kind.TOOL, "generic"), **fields
    )
