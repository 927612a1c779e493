"""What `--intercept` asks for, importable without mitmproxy (an optional dependency).

The CLI, the API and `Proxy` name these options whether or not mitmproxy is installed; the
interceptor itself is imported only when asked for, after `require_mitmproxy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forkpoint.importing import require_extra


@dataclass(frozen=True, slots=True)
class InterceptOptions:
    """Where the interceptor listens and which upstream certificates it accepts.

    `upstream_ca` is a PEM file of CAs trusted for upstreams besides the usual roots (an
    internal CA; a test's own); `insecure_upstream` skips upstream verification altogether.
    `confdir` holds forkpoint's CA (default: `$XDG_CONFIG_HOME/forkpoint`).
    """

    host: str = "127.0.0.1"
    port: int = 0
    insecure_upstream: bool = False
    upstream_ca: str | None = None
    confdir: Path | None = None


def require_mitmproxy() -> None:
    require_extra("intercept", "the interceptor (--intercept, forkpoint ca)")
