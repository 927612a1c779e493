"""The project's own matching settings, set once for a team: `forkpoint.toml`, or
`[tool.forkpoint]` in `pyproject.toml`.

    # forkpoint.toml (or [tool.forkpoint] in pyproject.toml)
    ignore = ["metadata.request_id", "$.input[*].id"]     # JSON paths matching drops
    normalize = ['Request-Id: \\w+', "myproject.matching:normalize"]   # regexes or functions
    optional = ["POST /telemetry.example.com/*"]           # side calls: never a divergence

    [agents]                                               # what `forkpoint worker` may run
    support = "python examples/support_agent/agent.py {label:ticket}"

The file is looked for in the current directory, then in each parent, and the first
directory that has one gives it (`forkpoint.toml` before a pyproject.toml that has the
table). Its settings come before those of the command line, the API's `Options` and the
pytest marker, which add to them.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkpoint.engine.matching import Normalizer
from forkpoint.engine.normalizers import Replace
from forkpoint.errors import ConfigError
from forkpoint.importing import load_function, looks_like_ref

__all__ = ["FILE_NAME", "ProjectConfig", "find_project_config", "normalizer"]

FILE_NAME = "forkpoint.toml"
KEYS = ("ignore", "normalize", "optional", "agents")


@dataclass(frozen=True, slots=True)
class ProjectConfig:
    """What a project's file says; `source` is the file, None when there is none."""

    ignore: tuple[str, ...] = ()
    normalize: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    agents: tuple[tuple[str, str], ...] = ()  # (name, command template) for workers
    source: Path | None = None


def find_project_config(start: Path | None = None) -> ProjectConfig:
    """The settings of the nearest project file at or above `start` (the current directory)."""
    directory = (start or Path.cwd()).resolve()
    for folder in (directory, *directory.parents):
        own = folder / FILE_NAME
        if own.is_file():
            return _parse(_read(own), own)
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            table = _read(pyproject).get("tool", {}).get("forkpoint")
            if table is not None:
                return _parse(table, pyproject, where="[tool.forkpoint] in ")
    return ProjectConfig()


def normalizer(text: str | Normalizer, *, what: str = "--normalize") -> Normalizer:
    """A normalizer from its text: `pkg.mod:fn` names a function, anything else is a regex
    whose matches are replaced. A callable is taken as it is."""
    if callable(text):
        return text
    if looks_like_ref(text):
        return load_function(text, what=f"{what} {text}")
    return Replace(text)


def _read(path: Path) -> dict[str, Any]:
    """The file's TOML, parsed once while its text stays the same: a pytest session asks for
    the project's settings once a test, and a pyproject.toml took 0.7 ms to parse each time.
    Keyed by the text itself, not its mtime, so an edit within the same second is seen."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from error
    key = (path, text)
    if key not in _PARSED:
        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path} is not valid TOML: {error}") from error
        if len(_PARSED) >= _KEEP:
            _PARSED.clear()
        _PARSED[key] = parsed
    return _PARSED[key]


_KEEP = 16  # files' parses kept (a session reads one or two)
_PARSED: dict[tuple[Path, str], dict[str, Any]] = {}


def _parse(table: Any, path: Path, *, where: str = "") -> ProjectConfig:
    name = f"{where}{path}"
    if not isinstance(table, dict):
        raise ConfigError(f"{name}: expected a table of {', '.join(KEYS)}")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ConfigError(f"{name}: unknown keys {unknown}; known: {list(KEYS)}")
    lists = {key: _strings(table.get(key, []), f"{name}: {key}") for key in KEYS[:3]}
    return ProjectConfig(**lists, agents=_agents(table.get("agents", {}), name), source=path)


def _agents(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(isinstance(c, str) for c in value.values()):
        raise ConfigError(f'{where}: agents must be a table of NAME = "COMMAND"')
    return tuple(value.items())


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{what} must be a list of strings")
    return tuple(value)
