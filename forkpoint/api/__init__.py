"""forkpoint's Python API: every verb of the CLI, with the same names, for scripts, asyncio
code and notebooks. The CLI is a thin layer over it; `forkpoint/__init__.py` re-exports it."""

from forkpoint.api.changes import make_change
from forkpoint.api.commands import afork, arecord, areplay, aresume, fork, record, replay, resume
from forkpoint.api.copying import Copied, copy
from forkpoint.api.experiments import ExperimentSpec, aexperiment, experiment
from forkpoint.api.mocks import mock, parse_mock
from forkpoint.api.options import Options, engine_config, store_location
from forkpoint.api.reading import (
    diff,
    experiment_list,
    experiment_results,
    export_run,
    held,
    import_run,
    runs,
    show,
    snapshots,
)
from forkpoint.api.results import Imported, RunRecord, RunResult, RunSnapshots
from forkpoint.api.serving import Serving, aserve, serve

__all__ = [
    "Copied",
    "ExperimentSpec",
    "Imported",
    "Options",
    "RunRecord",
    "RunResult",
    "RunSnapshots",
    "Serving",
    "aexperiment",
    "afork",
    "arecord",
    "areplay",
    "aresume",
    "aserve",
    "copy",
    "diff",
    "engine_config",
    "experiment",
    "experiment_list",
    "experiment_results",
    "export_run",
    "fork",
    "held",
    "import_run",
    "make_change",
    "mock",
    "parse_mock",
    "record",
    "replay",
    "resume",
    "runs",
    "serve",
    "show",
    "snapshots",
    "store_location",
]
