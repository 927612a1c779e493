"""Loading the user's own functions by name (`package.module:function`), as `python -m` would.

`--mock ROUTE=pkg.mod:fn` and `--check pkg.mod:fn` name functions in the user's project: the
current directory comes first on the import path, as it does for `python -m`, so a name that
works there works here without PYTHONPATH.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from forkpoint.errors import ConfigError


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
