"""The recipe against the shared token table (edge/cloudflare/testdata/
verdicts.json, written from the gateway's own key set): every token must be
admitted exactly when the gateway would admit it."""

import datetime
import json
import pathlib
import unittest
from unittest import mock
from wsgiref.util import setup_testing_defaults

import jwt.api_jwt

from waitroom_admission import WaitroomAdmission, parse_keys, verify_token

TABLE = json.loads(
    (pathlib.Path(__file__).parent / "../../../edge/cloudflare/testdata/verdicts.json").read_text()
)


def fixed_clock(now_ms):
    """PyJWT reads datetime.now; the table's verdicts are at its own time."""

    class Fixed(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime.fromtimestamp(now_ms / 1000, tz)

    return mock.patch.object(jwt.api_jwt, "datetime", Fixed)


class SharedTable(unittest.TestCase):
    def test_every_token(self):
        keys = parse_keys(TABLE["keys"])
        with fixed_clock(TABLE["now_ms"]):
            for row in TABLE["tokens"]:
                with self.subTest(row["name"]):
                    try:
                        got = verify_token(row["token"], keys, row["event"])
                    except (jwt.InvalidTokenError, ValueError, TypeError):
                        got = None
                    if row["valid"] and not row.get("pre_queue"):
                        self.assertEqual(
                            got,
                            {"subject": row["subject"], "position": row["position"], "event": row["event"]},
                        )
                    else:
                        self.assertIsNone(got, "refused by the gateway, so refused here")


class Middleware(unittest.TestCase):
    def call(self, token=None):
        good = next(r for r in TABLE["tokens"] if r["valid"] and not r.get("pre_queue"))
        seen = {}

        def app(environ, start_response):
            seen.update(environ["waitroom"])
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"checkout"]

        wrapped = WaitroomAdmission(app, parse_keys(TABLE["keys"]), good["event"])
        environ = {}
        setup_testing_defaults(environ)
        if token is not None:
            environ["HTTP_X_WAITROOM_TOKEN"] = token
        status = []
        with fixed_clock(TABLE["now_ms"]):
            body = b"".join(wrapped(environ, lambda s, h: status.append(s)))
        return status[0], body, seen, good

    def test_admitted(self):
        good = next(r for r in TABLE["tokens"] if r["valid"] and not r.get("pre_queue"))
        status, body, seen, _ = self.call(good["token"])
        self.assertEqual(status, "200 OK")
        self.assertEqual(body, b"checkout")
        self.assertEqual(seen["subject"], good["subject"])
        self.assertEqual(seen["position"], good["position"])

    def test_refused(self):
        pre = next(r for r in TABLE["tokens"] if r.get("pre_queue"))
        for token in (None, "", "garbage", pre["token"]):
            with self.subTest(token=token):
                status, body, _, _ = self.call(token)
                self.assertEqual(status, "403 Forbidden")
                self.assertEqual(json.loads(body)["error"], "not_admitted")


if __name__ == "__main__":
    unittest.main()
