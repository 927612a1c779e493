"""Importing what forkpoint does not always have: the user's own functions by name
(`package.module:function`), as `python -m` would, and forkpoint's optional dependencies.

`--mock ROUTE=pkg.mod:fn` and `--check pkg.mod:fn` name functions in the user's project: the
current directory comes first on the import path, as it does for `python -m`, so a name that
works there works here without PYTHONPATH.

Every part of forkpoint that needs an extra of pyproject.toml (`EXTRAS`) imports it through
`require_extra`, so a missing one is one line that names the extra to install, never a
traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from forkpoint.errors import ConfigError, MissingExtra

# extra of pyproject.toml -> the modules forkpoint imports from it (tests/cli/test_extras.py
# holds this table to pyproject.toml)
EXTRAS = {
    "postgres": ("psycopg", "psycopg_pool"),
    "workers": ("procrastinate",),
    "intercept": ("mitmproxy",),
    "fast": ("uvloop", "re2"),
    "ui": ("jinja2", "markupsafe"),
}


def require_extra(extra: str, what: str, *, modules: tuple[str, ...] = ()) -> list[ModuleType]:
    """Import the modules `what` (a part of forkpoint, "the PostgreSQL store") needs from
    `extra` (by default all the extra's own, `EXTRAS`); raise MissingExtra naming the extra
    when one does not import: not installed, or installed but broken (a missing system
    library), whose reason is kept to its first line."""
    imported = []
    for name in modules or EXTRAS[extra]:
        try:
            imported.append(importlib.import_module(name))
        except ImportError as error:
            found = str(error).strip().splitlines()
            reason = f"no module named {name}" if error.name == name or not found else found[0]
            raise MissingExtra(
                f"{what} needs the extra {extra} ({reason}): pip install 'forkpoint[{extra}]'",
                extra=extra,
            ) from error
    return imported


def looks_like_ref(text: str) -> bool:
    """Whether `text` has the shape `package.module:function`."""
    module, sep, name = text.partition(":")
    return bool(sep) and name.isidentifier() and all(p.isidentifier() for p in module.split("."))


def load_function(ref: str, *, what: str) -> Callable[..., Any]:
    """The callable `ref` names; `what` ("--mock 'GET /x=…'") prefixes every error."""
    if not looks_like_ref(ref):
        raise ConfigError(f"{what}: expected package.module:function, not {ref!r}")
    module_name, _, name = ref.partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"{what}: cannot load it: {error}") from error
    if not callable(function):
        raise ConfigError(f"{what} is not callable")
    return function  # type: ignore[no-any-return]
