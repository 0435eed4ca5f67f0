"""The events recipe against the shared table of signed events
(examples/backends/testdata/signatures.json, written from the origin's own
signer): every row must get its verdict."""

import hashlib
import hmac
import io
import json
import pathlib
import time
import unittest
from wsgiref.util import setup_testing_defaults

from waitroom_events import WaitroomEvents, verify_event

TABLE = json.loads(
    (pathlib.Path(__file__).parent / "../testdata/signatures.json").read_text(encoding="utf-8")
)


class SharedTable(unittest.TestCase):
    def test_every_signed_event(self):
        for row in TABLE["cases"]:
            with self.subTest(row["name"]):
                got = verify_event(
                    row["header"],
                    row["body"].encode("utf-8"),
                    TABLE["secret"],
                    now=TABLE["now"],
                    tolerance=TABLE["tolerance_seconds"],
                )
                self.assertEqual(got, row["valid"])


class App(unittest.TestCase):
    def call(self, app, body, header):
        environ = {}
        setup_testing_defaults(environ)
        environ.update(
            REQUEST_METHOD="POST",
            CONTENT_LENGTH=str(len(body)),
            HTTP_WAITROOM_SIGNATURE=header,
        )
        environ["wsgi.input"] = io.BytesIO(body)
        status = []
        app(environ, lambda s, h: status.append(s))
        return status[0]

    def test_handles_a_fresh_event_once_verified(self):
        body = TABLE["cases"][0]["body"].encode("utf-8")
        got = []
        app = WaitroomEvents(TABLE["secret"], got.append)
        ts = str(int(time.time()))
        v1 = hmac.new(TABLE["secret"].encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        self.assertEqual(self.call(app, body, f"t={ts},v1={v1}"), "204 No Content")
        self.assertEqual([e["type"] for e in got], ["booking.confirmed"])
        # The table's own signature is of a time long past.
        self.assertEqual(self.call(app, body, TABLE["cases"][0]["header"]), "400 Bad Request")
        self.assertEqual(len(got), 1)


if __name__ == "__main__":
    unittest.main()
