"""forkpoint: a save button for AI agents. Record, replay, fork and diff agent runs through a
transparent proxy.

    import forkpoint
    result = forkpoint.record(["python", "agent.py"], forkpoint.Options(name="ticket-1"))
    change = forkpoint.Change(model="gpt-4o-mini")
    forkpoint.fork("ticket-1", ["python", "agent.py"], at=2, change=change)

Every verb has an awaitable form (`arecord`, `afork`, …) for asyncio code; the plain forms
work in a notebook too. Names are loaded on first use: an agent that imports
`forkpoint.adapters.agent` pays for nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_API = (
    "Copied", "ExperimentSpec", "Imported", "Options", "Reader", "RunRecord", "RunResult",
    "RunSnapshots",
    "Serving", "aanswer", "aexperiment", "afork", "answer", "arecord", "areplay", "aresume",
    "aserve", "awake", "copy", "diff", "experiment",
    "experiment_list", "experiment_results", "export_run", "fork", "import_run", "make_change",
    "mock", "record", "replay", "resume", "runs", "serve", "show", "snapshots", "wake",
)  # fmt: skip
_ELSEWHERE = {
    "Change": "forkpoint.engine.changes",
    "MockRequest": "forkpoint.engine.mocks",
    "MockResponse": "forkpoint.engine.mocks",
    "OnDivergence": "forkpoint.engine.config",
    "Pace": "forkpoint.engine.pace",
    "SnapshotPolicy": "forkpoint.engine.snapshot_policy",
    "InterceptOptions": "forkpoint.runtime.intercept",
    "Exchange": "forkpoint.models",
    "Mode": "forkpoint.models",
    "Origin": "forkpoint.models",
    "Run": "forkpoint.models",
    "RunStatus": "forkpoint.models",
    "ForkpointError": "forkpoint.errors",
}

__all__ = ["__version__", *_API, *_ELSEWHERE]


def __getattr__(name: str) -> Any:
    if name == "__version__":  # importlib.metadata costs a CLI start 70 ms: only when asked
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("forkpoint")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    if name in _API:
        return getattr(importlib.import_module("forkpoint.api"), name)
    if name in _ELSEWHERE:
        return getattr(importlib.import_module(_ELSEWHERE[name]), name)
    raise AttributeError(f"module 'forkpoint' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # for type checkers and IDEs: the names as if imported here
    from forkpoint.api import (  # noqa: F401
        Copied,
        ExperimentSpec,
        Imported,
        Options,
        Reader,
        RunRecord,
        RunResult,
        RunSnapshots,
        Serving,
        aanswer,
        aexperiment,
        afork,
        answer,
        arecord,
        areplay,
        aresume,
        aserve,
        awake,
        copy,
        diff,
        experiment,
        experiment_list,
        experiment_results,
        export_run,
        fork,
        import_run,
        make_change,
        mock,
        record,
        replay,
        resume,
        runs,
        serve,
        show,
        snapshots,
        wake,
    )
    from forkpoint.engine.changes import Change  # noqa: F401
    from forkpoint.engine.config import OnDivergence  # noqa: F401
    from forkpoint.engine.mocks import MockRequest, MockResponse  # noqa: F401
    from forkpoint.engine.pace import Pace  # noqa: F401
    from forkpoint.engine.snapshot_policy import SnapshotPolicy  # noqa: F401
    from forkpoint.errors import ForkpointError  # noqa: F401
    from forkpoint.models import Exchange, Mode, Origin, Run, RunStatus  # noqa: F401
    from forkpoint.runtime.intercept import InterceptOptions  # noqa: F401
