"""How replay serves a recorded stream: as fast as possible, at its recorded pace, or faster."""

from __future__ import annotations

from dataclasses import dataclass

from forkpoint.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Pace:
    """How replay serves a stream: `factor` None is as fast as possible, 1.0 as recorded."""

    factor: float | None = None

    @classmethod
    def parse(cls, text: str) -> Pace:
        if text == "fast":
            return cls(None)
        if text == "recorded":
            return cls(1.0)
        try:
            factor = float(text.removeprefix("x"))
        except ValueError:
            factor = 0.0
        if factor <= 0:
            raise ConfigError(f"--pace takes recorded, fast or xN (N > 0), not {text!r}")
        return cls(factor)
