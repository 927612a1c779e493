"""Normalizers a user names by a regex (`--normalize REGEX`): every match in the strings of a
body is replaced, so what it matches never makes two requests differ.

A normalizer is any `(method, route, body) -> body` function (`matching.Normalizer`); one
named `pkg.mod:fn` is loaded by the API. A regex one is a picklable value, so a recorder's
writer process can rebuild it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from forkpoint.errors import ConfigError

REPLACEMENT = "<normalized>"


@dataclass(frozen=True, slots=True)
class Replace:
    """Replace each match of `pattern` in every string of a body (keys are left alone)."""

    pattern: str
    replacement: str = REPLACEMENT

    def __post_init__(self) -> None:
        try:
            _compiled(self.pattern)
        except re.error as error:
            raise ConfigError(f"--normalize {self.pattern!r} is not a regex: {error}") from None

    def __call__(self, method: str, route: str, value: Any) -> Any:
        return self._walk(_compiled(self.pattern), value)

    def _walk(self, pattern: re.Pattern[str], value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(self.replacement, value)
        if isinstance(value, dict):
            return {k: self._walk(pattern, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(pattern, item) for item in value]
        return value


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)
