"""Record modes of the pytest plugin, as pytest-recording's users know them."""

from __future__ import annotations

from enum import StrEnum

from forkpoint.errors import ConfigError


class RecordMode(StrEnum):
    """`none`: replay only, a request the cassette lacks fails the test (the default).
    `once`: record when the cassette does not exist yet, else replay.
    `new_episodes`: replay what the cassette has, record what it lacks, keep both.
    `all`: record from scratch, replacing the cassette (`rewrite` is another name for it)."""

    NONE = "none"
    ONCE = "once"
    NEW_EPISODES = "new_episodes"
    ALL = "all"

    @classmethod
    def parse(cls, text: str) -> RecordMode:
        if text == "rewrite":
            return cls.ALL
        try:
            return cls(text)
        except ValueError:
            valid = ", ".join(mode.value for mode in cls)
            raise ConfigError(
                f"--forkpoint-record takes {valid} (or rewrite, the same as all), not {text!r}"
            ) from None
