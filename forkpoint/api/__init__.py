"""forkpoint's Python API: every verb of the CLI, with the same names, for scripts, asyncio
code and notebooks. The CLI is a thin layer over it; `forkpoint/__init__.py` re-exports it.

Names load on first use, so a command that only reads a cassette (`forkpoint runs`) does not
pay for the proxy's imports (aiohttp, the runtime)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "Copied": "forkpoint.api.copying",
    "ExperimentSpec": "forkpoint.api.experiments",
    "Imported": "forkpoint.api.results",
    "Options": "forkpoint.api.options",
    "Progress": "forkpoint.api.on_workers",
    "Reader": "forkpoint.api.reader",
    "RunRecord": "forkpoint.api.results",
    "RunResult": "forkpoint.api.results",
    "RunSnapshots": "forkpoint.api.results",
    "Serving": "forkpoint.api.serving",
    "aanswer": "forkpoint.api.parking",
    "aexperiment": "forkpoint.api.experiments",
    "afork": "forkpoint.api.commands",
    "arecord": "forkpoint.api.commands",
    "answer": "forkpoint.api.parking",
    "areplay": "forkpoint.api.commands",
    "aresume": "forkpoint.api.commands",
    "aserve": "forkpoint.api.serving",
    "awake": "forkpoint.api.parking",
    "cancel_experiment": "forkpoint.api.on_workers",
    "copy": "forkpoint.api.copying",
    "diff": "forkpoint.api.reading",
    "engine_config": "forkpoint.api.options",
    "experiment": "forkpoint.api.experiments",
    "experiment_list": "forkpoint.api.reading",
    "experiment_progress": "forkpoint.api.on_workers",
    "experiment_results": "forkpoint.api.reading",
    "export_run": "forkpoint.api.reading",
    "fork": "forkpoint.api.commands",
    "held": "forkpoint.api.reading",
    "import_run": "forkpoint.api.reading",
    "make_change": "forkpoint.api.changes",
    "mock": "forkpoint.api.mocks",
    "parks": "forkpoint.api.reading",
    "parse_mock": "forkpoint.api.mocks",
    "record": "forkpoint.api.commands",
    "replay": "forkpoint.api.commands",
    "resume": "forkpoint.api.commands",
    "runs": "forkpoint.api.reading",
    "serve": "forkpoint.api.serving",
    "serve_stdio": "forkpoint.api.mcp",
    "show": "forkpoint.api.reading",
    "snapshots": "forkpoint.api.reading",
    "store_location": "forkpoint.api.options",
    "submit_experiment": "forkpoint.api.on_workers",
    "wake": "forkpoint.api.parking",
    "watch_experiment": "forkpoint.api.on_workers",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # found once
        return value
    raise AttributeError(f"module 'forkpoint.api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and IDEs: the names as if imported here
    from forkpoint.api.changes import (  # noqa: F401
        make_change,
    )
    from forkpoint.api.commands import (  # noqa: F401
        afork,
        arecord,
        areplay,
        aresume,
        fork,
        record,
        replay,
        resume,
    )
    from forkpoint.api.copying import (  # noqa: F401
        Copied,
        copy,
    )
    from forkpoint.api.experiments import (  # noqa: F401
        ExperimentSpec,
        aexperiment,
        experiment,
    )
    from forkpoint.api.mcp import (  # noqa: F401
        serve_stdio,
    )
    from forkpoint.api.mocks import (  # noqa: F401
        mock,
        parse_mock,
    )
    from forkpoint.api.on_workers import (  # noqa: F401
        Progress,
        cancel_experiment,
        experiment_progress,
        submit_experiment,
        watch_experiment,
    )
    from forkpoint.api.options import (  # noqa: F401
        Options,
        engine_config,
        store_location,
    )
    from forkpoint.api.parking import (  # noqa: F401
        aanswer,
        answer,
        awake,
        wake,
    )
    from forkpoint.api.reader import (  # noqa: F401
        Reader,
    )
    from forkpoint.api.reading import (  # noqa: F401
        diff,
        experiment_list,
        experiment_results,
        export_run,
        held,
        import_run,
        parks,
        runs,
        show,
        snapshots,
    )
    from forkpoint.api.results import (  # noqa: F401
        Imported,
        RunRecord,
        RunResult,
        RunSnapshots,
    )
    from forkpoint.api.serving import (  # noqa: F401
        Serving,
        aserve,
        serve,
    )
