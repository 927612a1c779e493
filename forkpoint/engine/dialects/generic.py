"""Everything that is not a model API: tool APIs and other HTTP.

A JSON request or response marks a tool call the agent made over HTTP; anything else (HTML,
images, empty bodies) is "other". Nothing more is read: there is no model, usage or text.
"""

from __future__ import annotations

from forkpoint.engine.dialects import _read as r
from forkpoint.engine.dialects._base import openai_error
from forkpoint.models import Headers, Kind, Summary


class Generic:
    name = "generic"

    def claims(self, method: str, path: str) -> bool:
        return True

    def summarize(
        self,
        request_json: object | None,
        response_body: bytes,
        *,
        streamed: bool,
        status: int | None,
    ) -> Summary:
        is_json = request_json is not None or r.loads(response_body) is not None
        return Summary(kind=Kind.TOOL if is_json else Kind.OTHER, dialect=self.name)

    def error_response(
        self, status: int, message: str, *, error_type: str
    ) -> tuple[Headers, bytes]:
        """OpenAI's error shape: a common choice for JSON APIs, and readable by any client."""
        return openai_error(message, error_type=error_type)

    def with_model(self, route: str, model: str) -> str:
        return route

    def model_in_route(self, route: str) -> str | None:
        return None
