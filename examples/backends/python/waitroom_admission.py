"""The Python recipe for a backend behind the waiting room.

WSGI middleware that serves a request only when it carries a queue token the
gateway issued for the event, in X-Waitroom-Token (an HS256 JWT, key chosen by
kid), checked with PyJWT (Debian: python3-jwt)::

    from waitroom_admission import WaitroomAdmission, parse_keys
    app = WaitroomAdmission(app, keys=parse_keys(os.environ["WAITROOM_KEYS"]), event=42)

It wraps any WSGI application (Flask, Django, Bottle, ...). An admitted
request carries environ["waitroom"] = {"subject", "position", "event"};
anything else is answered 403 not_admitted, as the origin answers it. The
token proves who the bearer is and that the gateway gave it its place, not
that its turn came: a waiting visitor holds one too (docs/gateway.md,
Checking admission in your backend).
"""

import json
import re

import jwt

# The gateway's leeway for clock skew between its nodes and the backend
# (waitroom.DefaultLeeway), in seconds.
LEEWAY_SECONDS = 5

# A compact JWT in base64url without padding, as the gateway writes it.
# PyJWT's decoder would also take standard base64 ("+", "/"), which the
# gateway refuses.
_COMPACT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")

_FORBIDDEN = json.dumps(
    {"error": "not_admitted", "message": "this page is reached through the waiting room"}
).encode()


def parse_keys(spec):
    """Reads WAITROOM_KEYS ("kid:secret,kid:secret"): the gateway's keys."""
    keys = {}
    for part in (spec or "").split(","):
        kid, sep, secret = part.strip().partition(":")
        if not sep or not kid or not secret:
            raise ValueError("WAITROOM_KEYS: want kid:secret[,kid:secret...]")
        keys[kid] = secret.encode()
    return keys


def _whole_seconds(value):
    # The gateway signs whole seconds only, and refuses any other time.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return float(value).is_integer()


def verify_token(token, keys, event):
    """Returns {"subject", "position", "event"} when token is a queue token
    for event that the gateway would admit; raises jwt.InvalidTokenError
    otherwise."""
    if not _COMPACT.fullmatch(token):
        raise jwt.InvalidTokenError("not a compact base64url token")
    header = jwt.get_unverified_header(token)
    kid = header.get("kid")
    if not isinstance(kid, str) or kid not in keys:
        raise jwt.InvalidTokenError("unknown or missing kid")
    claims = jwt.decode(
        token,
        keys[kid],
        algorithms=["HS256"],
        issuer="waitroom",
        leeway=LEEWAY_SECONDS,
        # The gateway sets no audience and ignores one.
        options={"require": ["exp", "iat", "iss", "sub"], "verify_aud": False},
    )
    # What PyJWT leaves to the application: the claims of a queue token.
    for name in ("exp", "iat", "nbf"):
        if name in claims and not _whole_seconds(claims[name]):
            raise jwt.InvalidTokenError(name + " is not a whole number of seconds")
    sub, evt, pos = claims.get("sub"), claims.get("evt"), claims.get("pos")
    if not isinstance(sub, str) or not sub:
        raise jwt.InvalidTokenError("no subject")
    if isinstance(evt, bool) or not isinstance(evt, int) or evt != event:
        raise jwt.InvalidTokenError("a token of another event")
    pre = claims.get("pre")
    if pre is not None and not isinstance(pre, bool):
        raise jwt.InvalidTokenError("pre is not a boolean")
    if pre:
        raise jwt.InvalidTokenError("a pre-queue token is never admitted")
    if isinstance(pos, bool) or not isinstance(pos, int) or pos <= 0 or pos > 2**53 - 1:
        raise jwt.InvalidTokenError("no position")
    return {"subject": sub, "position": pos, "event": evt}


class WaitroomAdmission:
    """WSGI middleware admitting only the gateway's admitted requests."""

    def __init__(self, app, keys, event):
        self.app, self.keys, self.event = app, keys, event

    def __call__(self, environ, start_response):
        token = environ.get("HTTP_X_WAITROOM_TOKEN", "")
        try:
            environ["waitroom"] = verify_token(token, self.keys, self.event)
        except (jwt.InvalidTokenError, ValueError, TypeError):
            start_response(
                "403 Forbidden",
                [
                    ("Content-Type", "application/json"),
                    ("Cache-Control", "no-store"),
                    ("Content-Length", str(len(_FORBIDDEN))),
                ],
            )
            return [_FORBIDDEN]
        return self.app(environ, start_response)
