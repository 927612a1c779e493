"""A run's launch, as data: what of an agent's environment it keeps (never a secret), the
command line that wakes it, and the environment a wake gives it back.

A launch keeps the agent's environment without the variables whose name says credential
(`secret_names`) or whose value looks like one (`shapes`), and without forkpoint's own;
`needs` names the secret ones, which a wake takes from the environment of whoever wakes it
(a missing one is a clear error before anything starts). Sans-io: plain data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from forkpoint.engine.secret_names import secret_name
from forkpoint.engine.shapes import find
from forkpoint.errors import ConfigError
from forkpoint.models import Headers, Launch

# forkpoint's own variables (`FORKPOINT_URL`, `FORKPOINT_RUN`, `FORKPOINT_TOKEN`…): a wake
# sets them anew, for its own proxy.
OWN_PREFIX = "FORKPOINT_"


def kept_env(
    env: Mapping[str, str], *, drop_clients: Sequence[str] = ()
) -> tuple[Headers, tuple[str, ...]]:
    """The variables a launch keeps, and the names of the secret ones it must not (`needs`).
    `drop_clients`: base-URL variables that point at a proxy (a run `serve` saw), which a
    wake points at its own."""
    clients = set(drop_clients)
    kept: list[tuple[str, str]] = []
    needs: list[str] = []
    for name, value in sorted(env.items()):
        if name.startswith(OWN_PREFIX) or name in clients:
            continue
        if secret_name(name) or find(value.encode("utf-8", "surrogateescape")):
            needs.append(name)
        else:
            kept.append((name, value))
    return tuple(kept), tuple(needs)


def resume_flags(launch: Launch) -> list[str]:
    """The `forkpoint resume` flags that give a wake the launch's options."""
    options = launch.options
    flags: list[str] = []
    if options.get("upstream"):
        flags += ["--upstream", str(options["upstream"])]
    routes = options.get("routes")
    for name, url in routes.items() if isinstance(routes, dict) else ():
        flags += ["--route", f"{name}={url}"]
    for key, flag in (("park", "--park"), ("redact", "--redact"), ("ignore", "--ignore"),
                      ("optional", "--optional"), ("normalize", "--normalize")):  # fmt: skip
        values = options.get(key)
        for value in values if isinstance(values, list) else ():
            flags += [flag, str(value)]
    for key, flag in (("park_after", "--park-after"), ("park_timeout", "--park-timeout")):
        if options.get(key) is not None:
            flags += [flag, str(options[key])]
    for word in launch.on_wake:
        flags += ["--on-wake", word]
    return flags


def resume_line(launch: Launch, *, program: Sequence[str] = ("forkpoint",)) -> list[str]:
    """The exact command line that wakes the run: `forkpoint resume RUN … -- COMMAND`, run
    in the launch's directory with `wake_env` (the store comes as FORKPOINT_STORE)."""
    return [*program, "resume", launch.run_id, *resume_flags(launch), "--", *launch.command]


def wake_env(
    launch: Launch, environ: Mapping[str, str], *, store: str | None = None
) -> dict[str, str]:
    """The woken agent's environment: the launch's, with the secrets it needs taken from
    `environ`; a missing one is a ConfigError naming it. `store`: FORKPOINT_STORE's value."""
    missing = [name for name in launch.needs if name not in environ]
    if missing:
        raise ConfigError(
            f"run {launch.run_id} needs {', '.join(missing)} to wake (secrets are never stored): "
            "set them in this environment and try again",
            run_id=launch.run_id,
        )
    env = dict(launch.env)
    env.update({name: environ[name] for name in launch.needs})
    if store is not None:
        env["FORKPOINT_STORE"] = store
    return env
