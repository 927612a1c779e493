"""forkpoint's own certificate authority, and the CA bundles the interceptor hands out.

The interceptor answers HTTPS for any host with a certificate it signs on the fly, so the agent
must trust forkpoint's CA. The CA is made on first use in forkpoint's config directory
(`$XDG_CONFIG_HOME/forkpoint`, else `~/.config/forkpoint`) by mitmproxy's certificate store,
which writes the private key with mode 0600. A command run with `--intercept` gets a bundle of
the system's roots plus that CA through the variables each client family reads, so it trusts
both the interceptor and everything it trusted before, with no code change.
"""

from __future__ import annotations

import hashlib
import os
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path

import certifi
from mitmproxy.addons.tlsconfig import CONF_BASENAME
from mitmproxy.certs import CertStore

from forkpoint.errors import ConfigError

KEY_SIZE = 2048  # mitmproxy's default; the CA is made once, so its cost does not matter
CLIENT_BUNDLE = "ca-bundle.pem"
CA_NAME = "forkpoint interception CA"
# Each client family reads its own variable: OpenSSL-based ones (Python's ssl, httpx, aiohttp,
# Ruby, PHP) SSL_CERT_FILE, requests REQUESTS_CA_BUNDLE, curl CURL_CA_BUNDLE. Node adds
# NODE_EXTRA_CA_CERTS to its built-in roots, so it gets the CA alone.
BUNDLE_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def config_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where forkpoint keeps its CA: `$XDG_CONFIG_HOME/forkpoint` or `~/.config/forkpoint`."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "forkpoint"


def ca_cert(confdir: Path) -> Path:
    """The CA's certificate (public), made with its key on first use.

    The files keep mitmproxy's names, which its `confdir` option looks for; the certificate
    is forkpoint's, so a trust store lists it under a name its user recognizes.
    """
    if not (confdir / f"{CONF_BASENAME}-ca.pem").exists():
        try:
            confdir.mkdir(mode=0o700, parents=True, exist_ok=True)
            CertStore.create_store(
                confdir, CONF_BASENAME, KEY_SIZE, organization="forkpoint", cn=CA_NAME
            )
        except OSError as error:
            raise ConfigError(f"cannot make forkpoint's CA in {confdir}: {error}") from error
    return confdir / f"{CONF_BASENAME}-ca-cert.pem"


def client_bundle(confdir: Path) -> Path:
    """The system's roots followed by forkpoint's CA, for the commands the interceptor serves."""
    return _bundle(confdir / CLIENT_BUNDLE, [system_roots(confdir), ca_cert(confdir)])


def upstream_bundle(confdir: Path, extra: str | os.PathLike[str]) -> Path:
    """certifi's roots (what mitmproxy verifies upstreams against) plus `extra`: mitmproxy's
    trusted-CA option replaces its roots, so both go in one file, named by content."""
    parts = [Path(certifi.where()), Path(extra)]
    digest = hashlib.sha256(b"".join(_read(p) for p in parts)).hexdigest()[:16]
    return _bundle(confdir / f"upstream-ca-{digest}.pem", parts)


def system_roots(confdir: Path) -> Path:
    """The roots the system's OpenSSL trusts (SSL_CERT_FILE included), else certifi's."""
    found = ssl.get_default_verify_paths().cafile
    if found and Path(found).resolve() != (confdir / CLIENT_BUNDLE).resolve():
        return Path(found)
    return Path(certifi.where())


def client_env(
    proxy_url: str, bundle: Path, ca: Path, base: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The variables that send a command's HTTP(S) through the interceptor and make it trust
    forkpoint's CA; loopback (the gateway, the agent's own state server) stays direct."""
    no_proxy = [h for h in (base.get("NO_PROXY") or base.get("no_proxy") or "").split(",") if h]
    no_proxy += [h for h in LOOPBACK if h not in no_proxy]
    env = {name: proxy_url for name in ("HTTPS_PROXY", "HTTP_PROXY")}
    env["NO_PROXY"] = ",".join(no_proxy)
    env |= {name.lower(): value for name, value in env.items()}
    env |= dict.fromkeys(BUNDLE_VARIABLES, str(bundle))
    env["NODE_EXTRA_CA_CERTS"] = str(ca)
    return env


def _bundle(path: Path, parts: Sequence[Path]) -> Path:
    content = b"\n".join(_read(p).strip() for p in parts) + b"\n"
    if not path.exists() or path.read_bytes() != content:
        # Another forkpoint may read it right now: write a sibling, then rename over.
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_bytes(content)
        partial.replace(path)
    return path


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read CA certificates from {path}: {error.strerror}") from error
