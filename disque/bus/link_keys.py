"""The TLS identity of the direct job links on a secured cluster (docs/security.md,
"The secured bus"; docs/design.md, "Direct job links").

Every node that knows secret S derives the same Ed25519 key from the seed
disque.bus.secret.link_seed(S) (scrypt, its own salt) and the same self-signed X.509
certificate for it: every field is fixed (serial, validity, subject, extensions) and Ed25519
signatures are deterministic, so the certificate's bytes are a function of S alone. Each end
of a link presents it and trusts only it (and, with `cluster-secret-previous`, the previous
secret's): a peer is let in by proving it holds the key, that is, that it knows S.

The front-end derives them and writes them 0600 into its private directory (mkdtemp, 0700,
removed when it stops) for its workers, which never see the secret
(disque/contracts/job_link_tls.py names the files and makes the TLS contexts from them).
The crypto is the `cryptography` package's and OpenSSL's; none is written here.
"""
import datetime
import os

from disque.contracts.job_link_tls import CA_FILE, CERT_FILE, KEY_FILE

SUBJECT = "disque cluster job links"
SERIAL = 1
NOT_BEFORE = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
NOT_AFTER = datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc)


def identity(seed):
    """(key PEM, certificate PEM) of the 32-byte `seed`: the same bytes on every node."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.x509.oid import NameOID

    key = Ed25519PrivateKey.from_private_bytes(seed)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SUBJECT)])
    public = key.public_key()
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(public)
            .serial_number(SERIAL)
            .not_valid_before(NOT_BEFORE).not_valid_after(NOT_AFTER)
            # its own CA: the one certificate a link end trusts
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            # key ids: with two secrets' certificates (same subject) in the trust store,
            # OpenSSL picks the one whose key signed, not the first of that name
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public),
                           critical=False)
            .sign(key, None))       # Ed25519: no separate hash
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def write_link_files(directory, seeds):
    """The serving identity (seeds[0]) and the certificates accepted (every seed's) as
    files 0600 in `directory`, for the workers (disque/contracts/job_link_tls.py)."""
    identities = [identity(seed) for seed in seeds]
    key_pem, cert_pem = identities[0]
    for name, data in ((KEY_FILE, key_pem), (CERT_FILE, cert_pem),
                       (CA_FILE, b"".join(cert for _key, cert in identities))):
        path = os.path.join(directory, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    return directory
