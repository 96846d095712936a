"""TLS and mTLS for the server, with certificates reloaded without a restart.

gRPC asks `CertificateFiles.fetch` for the configuration at every new handshake; it answers
with new certificates when a file changed (or after `reload()`, on SIGHUP) and None otherwise,
so connections already open, and their calls, are never dropped by a rotation.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from pathlib import Path

import grpc

log = logging.getLogger("meshplan.server")


EXPIRY_WARNING_S = 14 * 86400  # a certificate this close to its end is warned about


def warn_if_expiring(path: str, now: float | None = None) -> float | None:
    """Log a warning when the server certificate (the chain's first) has expired or expires
    within EXPIRY_WARNING_S; its end as a Unix time, None if it cannot be read. Clients refuse
    an expired certificate at the handshake, so the server would answer nobody over TLS."""
    try:
        # the standard library's own decoder (it reads the file, no validation)
        end = ssl.cert_time_to_seconds(ssl._ssl._test_decode_cert(path)["notAfter"])  # type: ignore[attr-defined]
    except (AttributeError, KeyError, OSError, ValueError, ssl.SSLError):
        return None
    left = end - (time.time() if now is None else now)
    if left <= 0:
        log.warning(
            "the server certificate %s expired %.1f days ago: clients will refuse TLS "
            "handshakes; replace it (it is read again on SIGHUP)",
            path,
            -left / 86400,
        )
    elif left < EXPIRY_WARNING_S:
        log.warning("the server certificate %s expires in %.1f days", path, left / 86400)
    return end


class CertificateFiles:
    """The server's certificate chain and key (PEM files), and the client CA for mTLS."""

    def __init__(self, cert: str, key: str, client_ca: str | None = None) -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self._config = self._read()  # raises OSError / ValueError on a bad file at start
        self._stamp = self._stamps()
        self._forced = False

    def _paths(self) -> list[str]:
        return [p for p in (self.cert, self.key, self.client_ca) if p]

    def _stamps(self) -> tuple[tuple[int, int], ...]:
        return tuple((st.st_mtime_ns, st.st_size) for st in map(os.stat, self._paths()))

    def _read(self) -> grpc.ServerCertificateConfiguration:
        chain, key = Path(self.cert).read_bytes(), Path(self.key).read_bytes()
        # the key must match the certificate: checked here, not at a client's handshake
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.cert, self.key, password=b"")
        roots = Path(self.client_ca).read_bytes() if self.client_ca else None
        warn_if_expiring(self.cert)
        return grpc.ssl_server_certificate_configuration([(key, chain)], root_certificates=roots)

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials that call `fetch` at each handshake; mTLS if a client CA is set."""
        return grpc.dynamic_ssl_server_credentials(
            self._config, self.fetch, require_client_authentication=self.client_ca is not None
        )

    def reload(self) -> None:
        """Read the files again at the next handshake (SIGHUP)."""
        self._forced = True

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """New configuration if a file changed or a reload was asked, else None (keep)."""
        try:
            stamp = self._stamps()
        except OSError:
            return None  # a file being replaced: keep the certificates in force
        if stamp == self._stamp and not self._forced:
            return None
        self._forced = False
        try:
            config = self._read()
        except (OSError, ValueError) as err:
            log.error("keeping the certificates in force: cannot reload them: %s", err)
            self._stamp = stamp  # do not retry a broken file at every handshake
            return None
        self._stamp = stamp
        log.info("TLS certificates reloaded from %s", ", ".join(self._paths()))
        return config
