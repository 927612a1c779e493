"""forkpoint's gateway in a process of its own, so the benchmark's client never shares its GIL.

Prints its base URL on the first line of stdout and serves until SIGTERM or SIGINT, then
commits every exchange and closes the run, so a recording is complete once the process exits.

    python benchmarks/_run_forkpoint.py --mode record --cassette c.db --upstream URL --run ID
    python benchmarks/_run_forkpoint.py --mode replay --cassette c.db --run ID
    ... --profile out.prof   # cProfile, written on exit (from 3.12 it sees every thread),
                             # and the writer process's into out-writer.prof
    ... --loop asyncio       # on asyncio's own loop, not forkpoint's choice (runtime.loops)
    ... --rules              # with settings no request of the benchmark meets (RULES)
"""

from __future__ import annotations

import argparse
import cProfile
import os
import time

from forkpoint.api import Options, engine_config
from forkpoint.cassettes.open import open_store
from forkpoint.runtime import collector, loops
from forkpoint.runtime.loop_thread import until_stopped
from forkpoint.runtime.proxy import Proxy
from forkpoint.runtime.recording import process

# Settings of the newer paths that no request of the benchmark meets: optional routes, an MCP
# server's route, more secret names, fields matching ignores. They must cost it nothing.
RULES = {
    "optional": ("POST /v1/telemetry/*", "*/otel/v1/traces"),
    "routes": {"mcp": "http://127.0.0.1:9/mcp", "tools": "http://127.0.0.1:9/tools"},
    "redact": ("x-bench-secret", "session_secret"),
    "ignore": ("metadata.request_id", "$.input[*].id"),
}


async def serve(mode: str, cassette: str, upstream: str | None, run: str, rules: bool) -> None:
    store = open_store(cassette)
    try:
        live = mode == "record"
        options = Options(upstream=upstream, **RULES) if rules else Options(upstream=upstream)
        proxy = Proxy(store, engine_config(options, live=live))
        if live:
            await proxy.sessions.record(run_id=run, name=run)
        else:
            await proxy.sessions.replay(run)
        print(await proxy.start(), flush=True)
        await until_stopped()
        await proxy.stop()
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("record", "replay"), required=True)
    parser.add_argument("--cassette", required=True, help="SQLite file or postgresql:// URL")
    parser.add_argument("--upstream", help="base URL to record from (record mode)")
    parser.add_argument("--run", required=True, help="run id to record, or to replay")
    parser.add_argument("--profile", help="write a cProfile of the process here on exit")
    parser.add_argument("--rules", action="store_true", help="with RULES' settings")
    parser.add_argument("--loop", choices=("default", "asyncio", "uvloop"), default="default",
                        help="the event loop; default: as a forkpoint command chooses it "
                             "(uvloop where installed)")  # fmt: skip
    args = parser.parse_args()
    if args.mode == "record" and not args.upstream:
        parser.error("--mode record needs --upstream")
    collector.tune()  # as a forkpoint command's process is (forkpoint.cli)
    # CPU time, not wall time: on a shared machine a send that wakes another process would
    # count the time this one waits for a core
    profiler = cProfile.Profile(time.process_time) if args.profile else None
    if profiler:
        profile_writer(args.profile.removesuffix(".prof") + "-writer.prof")
        profiler.enable()
    try:
        if args.loop != "default":
            os.environ[loops.ENV] = args.loop
        loops.run(serve(args.mode, args.cassette, args.upstream, args.run, args.rules))
    finally:
        if profiler:
            profiler.disable()
            profiler.dump_stats(args.profile)


def profile_writer(path: str) -> None:
    """Run the writer process (`runtime.recording.child`) under cProfile, dumped to `path` as
    it exits (its input closed by this process's stop)."""
    process._CHILD = (
        f"import cProfile, sys, time; sys.path.insert(0, {process._PACKAGE_ROOT!r}); "
        "from forkpoint.runtime.recording.child import main; "
        "profiler = cProfile.Profile(time.process_time); profiler.runcall(main); "
        f"profiler.dump_stats({path!r})"
    )


if __name__ == "__main__":
    main()
