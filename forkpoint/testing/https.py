"""HTTPS for local test services: a throwaway CA, server certificates it signs, an HTTPS site.

A test that runs a tool service or a fake model API over HTTPS, the way agents meet them, makes
a `TestCA`, serves its app with `serve_https`, and tells the client (or forkpoint's interceptor,
with `--upstream-ca`) to trust `ca.cert_path`. Keys are EC P-256: made in a millisecond.

    ca = TestCA(tmp_path)
    runner, url = await serve_https(app, ca.server_context(["127.0.0.2"]), host="127.0.0.2")
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from forkpoint.importing import require_extra

require_extra("intercept", "forkpoint.testing.https", modules=("cryptography",))

from cryptography import x509  # noqa: E402 (after the check)
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

__all__ = ["TestCA", "serve_https"]

_VALID = datetime.timedelta(days=2)


class TestCA:
    """A certificate authority in `directory`, for one test session."""

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, directory: Path, name: str = "forkpoint test CA"):
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (
            _builder(self._name, self._key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        self.cert_path = directory / "test-ca.pem"
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, hosts: Sequence[str]) -> tuple[Path, Path]:
        """A server certificate for `hosts` (names or IP addresses): its cert and key files."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
        cert = (
            _builder(subject, key.public_key(), issuer=self._name)
            .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(_key_usage(ca=False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        stem = self.directory / f"server-{hosts[0].replace(':', '_')}"
        cert_path, key_path = stem.with_suffix(".pem"), stem.with_suffix(".key")
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_path, key_path

    def server_context(self, hosts: Sequence[str]) -> ssl.SSLContext:
        """An SSL context for a server that answers as `hosts`."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*self.issue(hosts))
        return context


async def serve_https(
    app: web.Application, context: ssl.SSLContext, *, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, str]:
    """Serve `app` over HTTPS; its runner (to clean up) and base URL (`https://HOST:PORT`)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=context).start()
    bound_host, bound_port = runner.addresses[0][:2]
    return runner, f"https://{bound_host}:{bound_port}"


def _builder(
    subject: x509.Name, public_key: ec.EllipticCurvePublicKey, *, issuer: x509.Name | None = None
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _VALID)
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)
