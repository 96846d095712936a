"""TLS and mTLS for the server's ports, with certificates reloaded without a restart.

One `CertificateFiles` serves both transports: gRPC asks `fetch` for its configuration at every
new handshake, and the HTTP port's ssl context (`ssl_context`) asks at every handshake too; the
files are read again when one changed (or after `reload()`, on SIGHUP), once for both, so
connections already open, and their calls, are never dropped by a rotation.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
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
        self._lock = threading.Lock()  # gRPC's handshakes run on its threads, HTTP's on the loop
        self._config = self._read()  # raises OSError / ValueError on a bad file at start
        self._context = self._ssl()
        self._stamp = self._stamps()
        self._forced = False
        self._generation = self._grpc_seen = 0

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

    def _ssl(self) -> ssl.SSLContext:
        """The files as an ssl context for the HTTP port: TLS 1.2 or later, mTLS if a CA."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        if self.client_ca:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.client_ca)
        return context

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials that call `fetch` at each handshake; mTLS if a client CA is set."""
        return grpc.dynamic_ssl_server_credentials(
            self._config, self.fetch, require_client_authentication=self.client_ca is not None
        )

    def ssl_context(self) -> ssl.SSLContext:
        """An ssl context for the HTTP port whose every handshake takes the newest files."""
        context = self._ssl()
        context.sni_callback = self._handshake  # called with or without SNI
        return context

    def reload(self) -> None:
        """Read the files again at the next handshake (SIGHUP)."""
        self._forced = True

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's question: new configuration if the files changed since it last asked, else
        None (keep)."""
        self._refresh()
        with self._lock:
            if self._grpc_seen == self._generation:
                return None
            self._grpc_seen = self._generation
            return self._config

    def _handshake(self, connection: ssl.SSLObject, server_name: str | None, _: object) -> None:
        self._refresh()
        connection.context = self._context

    def _refresh(self) -> None:
        """Read the files again if one changed or a reload was asked (a broken file keeps the
        certificates in force and is not retried until it changes again)."""
        with self._lock:
            try:
                stamp = self._stamps()
            except OSError:
                return  # a file being replaced: keep the certificates in force
            if stamp == self._stamp and not self._forced:
                return
            self._forced, self._stamp = False, stamp
            try:
                config, context = self._read(), self._ssl()
            except (OSError, ValueError, ssl.SSLError) as err:
                log.error("keeping the certificates in force: cannot reload them: %s", err)
                return
            self._config, self._context = config, context
            self._generation += 1
        log.info("TLS certificates reloaded from %s", ", ".join(self._paths()))
