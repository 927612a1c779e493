"""`forkpoint ca`: where forkpoint's CA is, and how to trust it outside `--intercept`."""

from __future__ import annotations

import click

from forkpoint.cli.options import reports_errors
from forkpoint.runtime.intercept import require_mitmproxy

HOW_TO_TRUST = """\
forkpoint's CA certificate: {cert}  (its key beside it, readable by you only)
`forkpoint record|replay|fork|resume --intercept -- CMD` makes CMD trust it. Elsewhere:
  one shell:      export SSL_CERT_FILE={bundle} REQUESTS_CA_BUNDLE={bundle} \\
                         CURL_CA_BUNDLE={bundle} NODE_EXTRA_CA_CERTS={cert}
  Debian, Ubuntu: sudo cp {cert} /usr/local/share/ca-certificates/forkpoint.crt \\
                    && sudo update-ca-certificates
  Fedora, RHEL:   sudo cp {cert} /etc/pki/ca-trust/source/anchors/forkpoint.pem \\
                    && sudo update-ca-trust
  macOS:          sudo security add-trusted-cert -d -r trustRoot \\
                    -k /Library/Keychains/System.keychain {cert}
Whoever holds the key can intercept what trusts it: to make a new one, delete {confdir}."""


@click.command()
@click.option("--bundle", is_flag=True, help="Print the bundle's path: system roots + the CA.")
@reports_errors
def ca(bundle: bool) -> None:
    """Print the path of forkpoint's CA certificate (made on first use) and how to trust it.

    The interceptor (--intercept) answers HTTPS with certificates this CA signs. The path goes
    to stdout, the instructions to stderr.

    Example: curl --cacert "$(forkpoint ca)" -x http://127.0.0.1:8766 https://example.com
    """
    require_mitmproxy()
    from forkpoint.runtime import certs

    confdir = certs.config_dir()
    cert, ca_bundle = certs.ca_cert(confdir), certs.client_bundle(confdir)
    click.echo(ca_bundle if bundle else cert)
    click.echo(HOW_TO_TRUST.format(cert=cert, bundle=ca_bundle, confdir=confdir), err=True)
