"""When agent state is pulled: at each LLM request (the default), every N exchanges, every T s."""

from __future__ import annotations

from dataclasses import dataclass

from forkpoint.errors import ConfigError


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When to pull: at each LLM request, and/or every N exchanges, and/or every T seconds."""

    on_llm: bool = True
    every_steps: int | None = None
    every_seconds: float | None = None
    timeout: float = 2.0

    @classmethod
    def parse(cls, text: str | None, *, timeout: float = 2.0) -> SnapshotPolicy:
        """`llm` (the default), `N` exchanges, `Ts` seconds, or `off`."""
        if text in (None, "llm"):
            return cls(timeout=timeout)
        assert text is not None
        if text == "off":
            return cls(on_llm=False, timeout=timeout)
        try:
            if text.endswith("s"):
                return cls(on_llm=False, every_seconds=float(text[:-1]), timeout=timeout)
            return cls(on_llm=False, every_steps=int(text), timeout=timeout)
        except ValueError:
            raise ConfigError(f"--snapshot-every takes llm, off, N or Ts, not {text!r}") from None

    def due(self, step: int, llm: bool, since_last: float) -> bool:
        return (
            (self.on_llm and llm)
            or (self.every_steps is not None and step % self.every_steps == 0)
            or (self.every_seconds is not None and since_last >= self.every_seconds)
        )
