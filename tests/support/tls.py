"""TLS for the tests of the client port (tests/test_tls_port.py, tests/test_tls_cluster.py):
certificates made with the `cryptography` package (a CA, a server certificate for
127.0.0.1, client certificates: good, from another CA, expired), TLS nodes (`TlsServer`:
`tls-port` beside `port`, or alone) and clients (redis-py with ssl, a raw TLS socket)."""
from __future__ import annotations

import datetime
import socket
import ssl
import sys
from pathlib import Path

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from disque.harness.node import disque_argv
from disque.harness.ports import lease_port
from support.server import DisqueServer

DAY = datetime.timedelta(days=1)


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, key, cert):
    path.with_suffix(".key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def make_ca(path: Path, cn):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - DAY).not_valid_after(now + 30 * DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    _write(path, key, cert)
    return key, cert


def make_leaf(path: Path, ca, cn, *, server=False, expired=False):
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = (now - 30 * DAY, now - DAY) if expired else (now - DAY, now + 30 * DAY)
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end))
    if server:
        import ipaddress
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write(path, key, cert)
    return cert


class Certs:
    """Every certificate the tests need, in `directory`: ca, server, server2 (a second one
    from the same CA, for the reload test), client, other-client (another CA), expired-client."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        ca = make_ca(self.dir / "ca", "disque test CA")
        other = make_ca(self.dir / "other-ca", "another CA")
        self.server_serial = make_leaf(self.dir / "server", ca, "127.0.0.1", server=True).serial_number
        self.server2_serial = make_leaf(self.dir / "server2", ca, "127.0.0.1", server=True).serial_number
        make_leaf(self.dir / "client", ca, "a client")
        make_leaf(self.dir / "other-client", other, "a client of another CA")
        make_leaf(self.dir / "expired-client", ca, "an expired client", expired=True)

    def path(self, name):
        return str(self.dir / name)

    def server_args(self, **overrides):
        args = {"tls-cert-file": self.path("server.crt"), "tls-key-file": self.path("server.key"),
                "tls-ca-cert-file": self.path("ca.crt")}
        args.update({k.replace("_", "-"): v for k, v in overrides.items()})
        out = []
        for k, v in args.items():
            out += ["--" + k, v]
        return out

    def client_context(self, client="client", ca="ca"):
        ctx = ssl.create_default_context(cafile=self.path(ca + ".crt"))
        if client:
            ctx.load_cert_chain(self.path(client + ".crt"), self.path(client + ".key"))
        return ctx

    def cli_args(self, client="client"):
        """redis-cli / redis-benchmark flags."""
        args = ["--tls", "--cacert", self.path("ca.crt")]
        if client:
            args += ["--cert", self.path(client + ".crt"), "--key", self.path(client + ".key")]
        return args


def tls_call(certs: Certs, port, *args, client="client", timeout=10.0):
    """One command over a new TLS connection; the raw reply (a line or a bulk)."""
    from support.resp_client import encode_command
    ctx = certs.client_context(client)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(encode_command(*args))
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data


class TlsServer(DisqueServer):
    """A node with `tls-port`: beside a plaintext `port` (tls_only False; the TLS port is
    leased too) or instead of it (tls_only True: `--port 0`, the leased port is the TLS
    one, so the bus is on it + 10000, and readiness is a PING over TLS)."""

    def __init__(self, certs: Certs, workers=2, extra_args=(), tls_only=False, **kw):
        super().__init__(workers=workers, extra_args=extra_args, **kw)
        self.certs = certs
        self.tls_only = tls_only
        self.tls_lease = None if tls_only else lease_port()

    @property
    def tls_port(self):
        return self.port if self.tls_only else self.tls_lease.port

    def command_line(self, port):
        tls_port = port if self.tls_only else self.tls_lease.port
        tls = ["--tls-port", str(tls_port)] + self.certs.server_args()
        if self.tls_only:
            tls += ["--port", "0"]
        # the test's own arguments last: they win over these
        return disque_argv(port, self.workers, *tls, *self.extra_args, python=sys.executable)

    def ready(self):
        try:
            return tls_call(self.certs, self.tls_port, "PING", timeout=2.0).startswith(b"+PONG")
        except (OSError, ssl.SSLError):
            return False

    def tls_client(self, client="client", **kw) -> redis.Redis:
        """redis-py over TLS (raw RESP types, as DisqueServer.client)."""
        opts = dict(host="127.0.0.1", port=self.tls_port, ssl=True,
                    ssl_ca_certs=self.certs.path("ca.crt"), protocol=2,
                    socket_timeout=15, socket_connect_timeout=5)
        if client:
            opts.update(ssl_certfile=self.certs.path(client + ".crt"),
                        ssl_keyfile=self.certs.path(client + ".key"))
        opts.update(kw)
        c = redis.Redis(**opts)
        c.response_callbacks.clear()
        self._clients.append(c)
        return c

    def call(self, *args):
        """One command over TLS (the cluster harness joins TLS-only nodes with it)."""
        if self._client is None:
            self._client = self.tls_client()
        return self._client.execute_command(*args)

    def stop(self, *a, **kw):
        try:
            return super().stop(*a, **kw)
        finally:
            if self.tls_lease is not None:
                self.tls_lease.release()
                self.tls_lease = None
