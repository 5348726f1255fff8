"""Cluster secrets -> CURVE keys for the bus (docs/security.md).

A secret is turned into one curve25519 keypair with scrypt (deterministic, so every node that
knows the secret derives the same keys; slow on purpose, because a captured CURVE HELLO lets
an eavesdropper test guesses of a weak secret offline). Every node that knows secret S serves
its bus with keypair K(S), connects with K(S) as its client key and K(S).public as the
server key it expects, and accepts clients whose key is K(S).public. A node given a second
secret (`cluster-secret-previous`) also accepts K(previous) clients and, when a peer refuses
K(S), reaches it with K(previous): that is what lets a rotation run node by node.

The same secret also gives the TLS identity of the workers' direct job links
(disque/bus/link_keys.py): another 32-byte seed, stretched the same way with another salt
(LINK_KDF_SALT), so neither key tells anything about the other. Every secret stretched in
this project is stretched here, by `stretch`.
"""
import os

from disque.config import MAX_PASSWORD_LENGTH as MAX_SECRET_LENGTH, MIN_SECRET_LENGTH

KDF_SALT = b"disque cluster bus curve25519 key v1"
LINK_KDF_SALT = b"disque direct job links ed25519 tls identity v1"
KDF_N, KDF_R, KDF_P = 2 ** 14, 8, 1        # ~16 MB, tens of ms: once per secret at startup


class SecretError(ValueError):
    """A bad secret setting; str() is the one-line reason the server exits with."""


class Keypair:
    __slots__ = ("public", "secret", "public_raw")

    def __init__(self, public, secret):
        from zmq.utils import z85      # ZeroMQ: a secured node only
        self.public = public            # Z85 (40 bytes), as the ZeroMQ socket options take them
        self.secret = secret
        self.public_raw = z85.decode(public)    # 32 bytes, as ZAP requests carry them


def stretch(secret, salt):
    """32 bytes from `secret` (str) for one use, named by `salt` (scrypt: slow on purpose)."""
    import hashlib              # a secured node only
    return hashlib.scrypt(secret.encode("utf-8", "surrogateescape"), salt=salt,
                          n=KDF_N, r=KDF_R, p=KDF_P, dklen=32)


def derive_keypair(secret):
    """The CURVE keypair every node knowing `secret` (str) derives."""
    import zmq                  # a secured node only
    from zmq.utils import z85
    secret_z85 = z85.encode(stretch(secret, KDF_SALT))
    return Keypair(zmq.curve_public(secret_z85), secret_z85)


def link_seed(secret):
    """The seed of the job links' Ed25519 key and certificate (disque/bus/link_keys.py)."""
    return stretch(secret, LINK_KDF_SALT)


class BusKeys:
    """The keypairs of a secured bus: `serving` first (the ROUTER's and the first tried),
    then the previous secret's, if any; and the seeds of the direct job links' TLS identities
    in the same order (the secrets themselves are not kept)."""

    def __init__(self, secret, previous=None):
        secrets = [secret] + ([previous] if previous is not None else [])
        self.pairs = [derive_keypair(s) for s in secrets]
        self.link_seeds = [link_seed(s) for s in secrets]
        self.accepted = frozenset(p.public_raw for p in self.pairs)

    @property
    def serving(self):
        return self.pairs[0]


def check_secret(text, name="cluster-secret"):
    if len(text) < MIN_SECRET_LENGTH:
        raise SecretError("%s must be at least %d characters long (try `openssl rand -hex 32`)"
                          % (name, MIN_SECRET_LENGTH))
    if len(text) > MAX_SECRET_LENGTH:
        raise SecretError("%s is longer than %d characters" % (name, MAX_SECRET_LENGTH))


def read_secret_file(path):
    """(secret, previous or None) from a file: the first non-empty, non-# line is the secret,
    an optional second one the previous secret."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            lines = [ln.strip() for ln in f.read().splitlines()]
    except OSError as e:
        raise SecretError("cluster-secret-file %s: %s" % (path, e.strerror or e)) from None
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    if not lines or len(lines) > 2:
        raise SecretError("cluster-secret-file %s must hold one secret, or two lines: the "
                          "secret and the previous one" % path)
    check_secret(lines[0], "the secret in " + path)
    if len(lines) == 2:
        check_secret(lines[1], "the previous secret in " + path)
    return lines[0], (lines[1] if len(lines) == 2 else None)


def file_is_private(path):
    """False when group or others may read the file (the server warns)."""
    try:
        return not os.stat(path).st_mode & 0o077
    except OSError:
        return True


def bus_keys_from_config(cfg):
    """BusKeys for the configured secrets, or None for an open bus. Raises SecretError."""
    secret, previous = cfg.cluster_secret, cfg.cluster_secret_previous
    if cfg.cluster_secret_file:
        if secret is not None:
            raise SecretError("cluster-secret and cluster-secret-file are both set: use one")
        path = cfg.resolve_path(cfg.cluster_secret_file)
        secret, from_file = read_secret_file(path)
        if from_file is not None:
            if previous is not None:
                raise SecretError("the previous secret is set both in %s and with "
                                  "cluster-secret-previous: use one" % path)
            previous = from_file
    if secret is None:
        if previous is not None:
            raise SecretError("cluster-secret-previous needs cluster-secret")
        return None
    if previous == secret:
        previous = None
    import zmq
    if not zmq.has("curve"):
        raise SecretError("cluster-secret needs CURVE support in ZeroMQ, and this pyzmq's "
                          "libzmq was built without it")
    return BusKeys(secret, previous)
