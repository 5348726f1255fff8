"""The TLS settings of the client port and the server context made from them (docs/security.md,
"TLS on the client port"). One place for both ends: the front-end builds a context to check
the settings (at start-up, where a bad file stops the node with a one-line reason, and on
CONFIG SET, where it is refused and the old one kept); the workers, which run the TLS
connections, build theirs from the same settings (disque/workers/tls_clients.py).

The directives keep Redis' names and meanings. No cryptography is written here: the
standard library's ssl module (OpenSSL) does it all.
"""
import ssl

# the directives that make the context, as the workers receive them (CONFIG SET of any of
# them makes a new context for the connections that come after)
SETTINGS = ("tls-cert-file", "tls-key-file", "tls-key-file-pass", "tls-ca-cert-file",
            "tls-ca-cert-dir", "tls-dh-params-file", "tls-auth-clients", "tls-protocols",
            "tls-ciphers", "tls-prefer-server-ciphers", "tls-session-caching")

PROTOCOLS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}
VERIFY = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "no": ssl.CERT_NONE}

HANDSHAKE_TIMEOUT = 10.0     # seconds a connection may take to finish its handshake


class TlsConfigError(ValueError):
    """A setting the context cannot be made with; str() is the one-line reason."""


def settings_of(cfg):
    """The TLS settings of a Config, as a plain dict (sent to the workers)."""
    return {name: cfg.get(name) for name in SETTINGS}


def protocol_range(text):
    """tls-protocols ("TLSv1.2 TLSv1.3", any order; empty: both) -> (lowest, highest)."""
    words = text.lower().split() or ["tlsv1.2", "tlsv1.3"]
    unknown = [w for w in words if w not in PROTOCOLS]
    if unknown:
        raise TlsConfigError("tls-protocols: %s is not supported (TLSv1.2 and TLSv1.3 are)"
                             % unknown[0])
    versions = sorted(PROTOCOLS[w] for w in words)
    if len(words) == 2 and versions[0] == versions[1]:
        raise TlsConfigError("tls-protocols names %s twice" % words[0])
    return versions[0], versions[-1]


def server_context(settings, needs="tls-port"):
    """An ssl.SSLContext for the client port; TlsConfigError names what is wrong."""
    ctx = certificate_context(settings, needs)
    s = settings
    ctx.verify_mode = VERIFY[s["tls-auth-clients"]]
    if s["tls-ca-cert-file"] or s["tls-ca-cert-dir"]:
        try:
            ctx.load_verify_locations(cafile=s["tls-ca-cert-file"] or None,
                                      capath=s["tls-ca-cert-dir"] or None)
        except (ssl.SSLError, OSError) as e:
            raise TlsConfigError("tls-ca-cert-file / tls-ca-cert-dir: %s" % reason(e))
    elif ctx.verify_mode != ssl.CERT_NONE:
        raise TlsConfigError("tls-auth-clients %s needs tls-ca-cert-file or tls-ca-cert-dir "
                             "(or tls-auth-clients no)" % s["tls-auth-clients"])
    return ctx


def https_context(settings):
    """The metrics port's (`metrics-tls yes`): the same certificate, protocols and ciphers,
    no client certificate asked (the console has its password)."""
    return certificate_context(settings, "metrics-tls")


def certificate_context(settings, needs):
    """A server context with the certificate and the protocol, cipher and session options."""
    s = settings
    if not s["tls-cert-file"] or not s["tls-key-file"]:
        raise TlsConfigError("%s needs tls-cert-file and tls-key-file" % needs)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version, ctx.maximum_version = protocol_range(s["tls-protocols"])
    # renegotiation would let a client make this worker write while it reads
    ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
    if s["tls-prefer-server-ciphers"]:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    if not s["tls-session-caching"]:
        ctx.options |= ssl.OP_NO_TICKET
    try:
        ctx.load_cert_chain(s["tls-cert-file"], s["tls-key-file"],
                            password=s["tls-key-file-pass"] or None)
    except FileNotFoundError as e:
        raise TlsConfigError("tls-cert-file / tls-key-file: %s: %s" % (e.filename or "", e.strerror))
    except ssl.SSLError as e:
        raise TlsConfigError("tls-cert-file / tls-key-file %s, %s: %s"
                             % (s["tls-cert-file"], s["tls-key-file"], reason(e)))
    except OSError as e:
        raise TlsConfigError("tls-cert-file / tls-key-file: %s" % (e.strerror or e))
    if s["tls-dh-params-file"]:
        try:
            ctx.load_dh_params(s["tls-dh-params-file"])
        except (ssl.SSLError, OSError) as e:
            raise TlsConfigError("tls-dh-params-file %s: %s" % (s["tls-dh-params-file"], reason(e)))
    if s["tls-ciphers"]:
        try:
            ctx.set_ciphers(s["tls-ciphers"])
        except ssl.SSLError:
            raise TlsConfigError("tls-ciphers %r: no cipher can be selected" % s["tls-ciphers"])
    return ctx


def reason(e):
    """An ssl error's reason in a few words (for the log and config errors)."""
    if isinstance(e, ssl.SSLError) and e.reason:
        return e.reason.replace("_", " ").lower()
    text = getattr(e, "strerror", None) or str(e)
    return text.split("] ", 1)[-1]
