"""A fork's `Change` from the text options of the CLI, a spec file or a pytest marker."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from forkpoint.api.mocks import parse_mock
from forkpoint.engine.changes import Change, load_patch
from forkpoint.engine.mocks import MockRule
from forkpoint.errors import ConfigError

__all__ = ["make_change"]


def make_change(
    *,
    model: str | None = None,
    upstream: str | None = None,
    system_prompt: str | None = None,
    patch: str | None = None,
    mocks: Sequence[str | MockRule] = (),
    base_dir: Path = Path(),
) -> Change:
    """A Change from text; `@FILE` reads a prompt or patch from a file (relative to
    `base_dir`), and each mock is `ROUTE=SPEC` or a rule made by `forkpoint.mock`."""
    return Change(
        model=model,
        upstream=upstream,
        system_prompt=None if system_prompt is None else _text_or_file(system_prompt, base_dir),
        patch=() if patch is None else load_patch(_text_or_file(patch, base_dir)),
        mocks=tuple(
            m if isinstance(m, MockRule) else parse_mock(m, base_dir=base_dir) for m in mocks
        ),
    )


def _text_or_file(value: str, base_dir: Path) -> str:
    if not value.startswith("@"):
        return value
    path = base_dir / value[1:]
    try:
        return path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from error
