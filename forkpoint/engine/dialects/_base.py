"""What the LLM dialects share: a JSON answer, or SSE when streamed, and OpenAI's error shape."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from urllib.parse import quote, unquote

import orjson

from forkpoint.engine.dialects import _read as r
from forkpoint.models import Headers, Summary

_ERROR_HEADERS = (("content-type", "application/json"), ("x-should-retry", "false"))
# Azure OpenAI names the model by its deployment, in the path: `/openai/deployments/NAME/…`.
_DEPLOYMENT = re.compile(r"^(?P<head>.*/openai/deployments/)(?P<model>[^/]+)(?P<tail>/.*)$")


def openai_error(message: str, *, error_type: str) -> tuple[Headers, bytes]:
    """An error the openai SDKs raise as `APIStatusError` with `message` in its text.

    `x-should-retry: false` stops the SDKs' automatic retries: forkpoint's own errors
    (a divergence, a missing recording) would only repeat.
    """
    body = {"error": {"message": message, "type": error_type, "param": None, "code": error_type}}
    return _ERROR_HEADERS, orjson.dumps(body)


def anthropic_error(message: str, *, error_type: str) -> tuple[Headers, bytes]:
    """An error the anthropic SDK raises as `APIStatusError` with `message` in its text."""
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return _ERROR_HEADERS, orjson.dumps(body)


class LlmDialect(ABC):
    """A model API: `summarize` reads a stream's SSE text or a whole JSON answer."""

    name: str

    @abstractmethod
    def claims(self, method: str, path: str) -> bool: ...

    def summarize(
        self, request_json: object | None, response_body: bytes, *, streamed: bool,
        status: int | None,
    ) -> Summary:  # fmt: skip
        if r.is_stream(response_body, streamed):
            return self.summarize_stream(request_json, response_body)
        return self.summarize_answer(request_json, r.loads(response_body))

    @abstractmethod
    def summarize_stream(self, request_json: object | None, body: bytes) -> Summary: ...

    @abstractmethod
    def summarize_answer(self, request_json: object | None, answer: object) -> Summary: ...

    def error_response(
        self, status: int, message: str, *, error_type: str
    ) -> tuple[Headers, bytes]:
        return openai_error(message, error_type=error_type)

    def with_model(self, route: str, model: str) -> str:
        """The route for another model: an Azure deployment's path names the new one."""
        path, sep, query = route.partition("?")
        found = _DEPLOYMENT.match(path)
        if found is None:
            return route
        return f"{found['head']}{quote(model, safe='')}{found['tail']}{sep}{query}"

    def model_in_route(self, route: str) -> str | None:
        """The model the route names (an Azure deployment), or None where only the body does."""
        found = _DEPLOYMENT.match(route.partition("?")[0])
        return None if found is None else unquote(found["model"])
