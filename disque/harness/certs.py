"""Test certificates for TLS nodes (tests/test_server_tls.py, tests/test_cluster_tls.py,
bench/bench_tls.py): a CA, server certificates for 127.0.0.1, client certificates (good,
from another CA, expired), made with the `cryptography` package, and one command over a
new TLS connection."""
from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

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


def tls_ping(certs: Certs, port, client="client", timeout=10.0):
    """PING over a new TLS connection: the raw reply (b"+PONG\\r\\n"), b"" if it closed."""
    ctx = certs.client_context(client)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"PING\r\n")
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(256)
                if not chunk:
                    break
                data += chunk
            return data
