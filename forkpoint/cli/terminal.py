"""Text from a cassette, shown harmless: a run's name, an error, an answer can hold escape
sequences (retitle the terminal, clear it, hide what follows) or bidirectional overrides.

`visible` writes each control character as its escape (`\\x1b`), so it is seen, not obeyed;
`echo` is click.echo through it; `VisibleFile` is a stream for rich's Console that, on a
terminal, lets colours (SGR sequences: rich's own, or a name's, which only colour) through and
shows every other control character.
"""

from __future__ import annotations

import re
from typing import IO, cast

import click

__all__ = ["VisibleFile", "echo", "visible", "visible_stream"]

# C0 and C1 controls but newline and tab, DEL, and the bidirectional overrides and isolates
_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"
_CONTROLS = re.compile(_CONTROL)
_BUT_COLOURS = re.compile(r"\x1b\[[0-9;]*m|(" + _CONTROL + ")")


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with its control characters written as escapes (newlines and tabs kept)."""
    return _CONTROLS.sub(lambda found: _escaped(found.group()), text)


def echo(message: str, *, err: bool = False, nl: bool = True) -> None:
    click.echo(visible(message), err=err, nl=nl)


class VisibleFile:
    """A text stream that shows the control characters written to it, but colours."""

    def __init__(self, file: IO[str]):
        self._file = file

    def write(self, text: str) -> int:
        if not self._file.isatty():  # rich writes no colours then: nothing to let through
            return self._file.write(visible(text))
        return self._file.write(
            _BUT_COLOURS.sub(lambda m: _escaped(m.group(1)) if m.group(1) else m.group(), text)
        )

    def flush(self) -> None:
        self._file.flush()

    def isatty(self) -> bool:
        return self._file.isatty()

    def fileno(self) -> int:
        return self._file.fileno()


def visible_stream(file: IO[str]) -> IO[str]:
    """`file` through a VisibleFile, typed as the stream rich's Console takes."""
    return cast(IO[str], VisibleFile(file))
