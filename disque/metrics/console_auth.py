"""Who may do what on the metrics port (docs/console.md, "Security model").

Reading (every GET): HTTP basic auth with `requirepass` when it is set, unless
`metrics-auth no`. Acting (POST /api/console/action), all of:
  * `metrics-actions yes` and `requirepass` set, and the request carries that password
    (HTTP basic) whatever `metrics-auth` says;
  * the browser says the request is same-origin: `Sec-Fetch-Site: same-origin`, or, from a
    client that sends no Sec-Fetch-Site, an `Origin` equal to the page's own;
  * JSON (`Content-Type: application/json`: an HTML form cannot send it cross-site);
  * the session's token in `X-Console-Token`: a session is a cookie (HttpOnly,
    SameSite=Strict, named after the node) given by GET /api/console/session with its token; the token is an
    HMAC of the session under a key made at start, so no session is stored and a restart
    ends them all. Another origin can neither read the token nor send the cookie.
"""
import base64
import binascii
import hashlib
import hmac
import os
import time

# cookies are kept per host, not per port: each node's console names its own, so the
# consoles of several nodes reached on one host (tunnels to localhost) keep their sessions
SESSION_COOKIE = "disque_console_%s"
TOKEN_HEADER = "x-console-token"
SESSION_TTL_S = 12 * 3600


def basic_password(req):
    """The password of an HTTP basic Authorization header, or None."""
    scheme, _, cred = req.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user_pass = base64.b64decode(cred.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    return user_pass.partition(b":")[2]


def password_ok(req, requirepass):
    given = basic_password(req)
    return given is not None and hmac.compare_digest(
        given, requirepass.encode("utf-8", "surrogateescape"))


class ConsoleAuth:
    def __init__(self, cfg, node_id):
        self.cfg = cfg
        self.key = os.urandom(32)
        self.cookie = SESSION_COOKIE % node_id[:8]

    def may_read(self, req):
        cfg = self.cfg
        return not cfg.requirepass or not cfg.metrics_auth or password_ok(req, cfg.requirepass)

    def actions_possible(self):
        return bool(self.cfg.metrics_actions and self.cfg.requirepass)

    # ---- sessions -----------------------------------------------------------------------

    def token(self, session):
        return hmac.new(self.key, session.encode(), hashlib.sha256).hexdigest()

    def new_session(self):
        """(cookie value, token)."""
        session = "%d.%s" % (int(time.time()), os.urandom(16).hex())
        return session, self.token(session)

    def cookie_header(self, session, secure=False):
        """`secure`: the page came over HTTPS (metrics-tls), so the cookie never goes over HTTP."""
        return ("Set-Cookie", "%s=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%d%s"
                % (self.cookie, session, SESSION_TTL_S, "; Secure" if secure else ""))

    def session_ok(self, req):
        session = req.cookies.get(self.cookie, "")
        issued, _, _ = session.partition(".")
        if not issued.isdigit() or time.time() - int(issued) > SESSION_TTL_S:
            return False
        given = req.headers.get(TOKEN_HEADER, "")
        return hmac.compare_digest(given.encode(errors="replace"), self.token(session).encode())

    @staticmethod
    def same_origin(req):
        site = req.headers.get("sec-fetch-site")
        if site is not None:
            return site == "same-origin"
        origin = req.headers.get("origin")
        host = req.headers.get("host")
        return bool(origin and host) and origin in ("http://" + host, "https://" + host)

    def refuse_action(self, req):
        """Why this POST may not act, or None when it may."""
        cfg = self.cfg
        if not cfg.metrics_actions:
            return 403, "actions are off on this node (metrics-actions no)"
        if not cfg.requirepass:
            return 403, "actions need requirepass to be set"
        if not password_ok(req, cfg.requirepass):
            return 401, "actions need the requirepass password (HTTP basic auth)"
        if not self.same_origin(req):
            return 403, "cross-origin request refused"
        if req.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return 415, "actions take application/json"
        if not self.session_ok(req):
            return 403, "missing or wrong console token (reload the page)"
        return None
