"""The Python recipe for a site that takes Waitroom's booking events.

Checks the Waitroom-Signature header of each event (docs/api.md §17) with
the standard library's hmac, then hands the event on. A WSGI app::

    from waitroom_events import WaitroomEvents
    hook = WaitroomEvents(secret=os.environ["WAITROOM_EVENTS_SECRET"],  # ORIGIN_EVENTS_SECRET
                          handle=orders.apply)  # dedup on event["id"]: an event may come twice

The signature covers the raw bytes of the body: verify them before any JSON
parsing. Answer 2xx only once the event is safely handled; anything else has
the origin send it again.
"""

import hashlib
import hmac
import json
import time

HEADER = "Waitroom-Signature"
# How far the signature's time may be from the clock, in seconds.
TOLERANCE_SECONDS = 300


def verify_event(header, body, secret, now=None, tolerance=TOLERANCE_SECONDS):
    """True when header signs body (bytes, as received) with secret, made
    within tolerance seconds of now."""
    ts, sigs = "", []
    for part in (header or "").split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            ts = value
        elif key == "v1":
            sigs.append(value)
    if not ts.isdigit() or not sigs:
        return False
    now = time.time() if now is None else now
    if abs(now - int(ts)) > tolerance:
        return False
    if isinstance(secret, str):
        secret = secret.encode()
    want = hmac.new(secret, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(want, s.lower()) for s in sigs if s.isascii())


class WaitroomEvents:
    """A WSGI app taking booking events: 400 for a bad signature or body,
    500 when handle raises (the origin sends the event again), 204 once
    handled."""

    def __init__(self, secret, handle, clock=time.time):
        self.secret, self.handle, self.clock = secret, handle, clock

    def __call__(self, environ, start_response):
        try:
            size = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            size = 0
        if size > 1 << 20:
            return _answer(start_response, "413 Content Too Large")
        body = environ["wsgi.input"].read(size)
        header = environ.get("HTTP_WAITROOM_SIGNATURE", "")
        if not verify_event(header, body, self.secret, now=self.clock()):
            return _answer(start_response, "400 Bad Request")
        try:
            event = json.loads(body)
        except ValueError:
            return _answer(start_response, "400 Bad Request")
        try:
            self.handle(event)
        except Exception:  # noqa: BLE001 - any failure: have it sent again
            return _answer(start_response, "500 Internal Server Error")
        return _answer(start_response, "204 No Content")


def _answer(start_response, status):
    start_response(status, [("Content-Length", "0")])
    return [b""]
