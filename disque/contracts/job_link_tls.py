"""The TLS of the direct job links on a secured cluster, as both processes see it: the files
a front-end writes for its workers (disque/bus/link_keys.py derives them from the cluster
secret) and the TLS contexts a worker makes from them (disque/workers/job_links.py).

TLS 1.3 only; both ends present the derived certificate and require the peer's to chain to
a certificate of CA_FILE (the current secret's, and the previous one's during a rotation),
with no host name check: the certificate names no host, holding its key is the proof. No
session tickets: a link is one long connection, and the connecting end never reads, so
nothing should arrive on it after the handshake.
"""
import os
import ssl

KEY_FILE = "job-link-key.pem"       # the serving secret's Ed25519 key (PKCS#8)
CERT_FILE = "job-link-cert.pem"     # its self-signed certificate
CA_FILE = "job-link-ca.pem"         # the certificates accepted: current, then previous


def contexts(directory):
    """(server context, client context) from the files in `directory`."""
    made = []
    for purpose in (ssl.PROTOCOL_TLS_SERVER, ssl.PROTOCOL_TLS_CLIENT):
        ctx = ssl.SSLContext(purpose)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_cert_chain(os.path.join(directory, CERT_FILE), os.path.join(directory, KEY_FILE))
        ctx.load_verify_locations(os.path.join(directory, CA_FILE))
        made.append(ctx)
    made[0].num_tickets = 0
    return made[0], made[1]
