// The events recipe against the shared table of signed events
// (examples/backends/testdata/signatures.json, written from the origin's
// own signer): every row must get its verdict.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { createHmac } from "node:crypto";
import { verifyEvent, waitroomEvents } from "../events.js";

const table = JSON.parse(readFileSync(new URL("../../testdata/signatures.json", import.meta.url), "utf8"));

test("every signed event of the shared table", async (t) => {
  for (const row of table.cases) {
    await t.test(row.name, () => {
      const got = verifyEvent(row.header, Buffer.from(row.body, "utf8"), table.secret, {
        now: table.now * 1000,
        tolerance: table.tolerance_seconds,
      });
      assert.equal(got, row.valid);
    });
  }
});

test("the handler in a node:http server", async () => {
  const body = table.cases[0].body;
  const got = [];
  const hook = waitroomEvents({ secret: table.secret, handle: async (ev) => got.push(ev) });
  const server = createServer(hook);
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}/hooks/waitroom`;
  try {
    const ts = Math.floor(Date.now() / 1000);
    const v1 = createHmac("sha256", table.secret).update(`${ts}.${body}`).digest("hex");
    let res = await fetch(url, { method: "POST", body, headers: { "Waitroom-Signature": `t=${ts},v1=${v1}` } });
    assert.equal(res.status, 204);
    assert.equal(got.length, 1);
    assert.equal(got[0].type, "booking.confirmed");
    res = await fetch(url, { method: "POST", body, headers: { "Waitroom-Signature": table.cases[0].header } });
    assert.equal(res.status, 400, "the table's time is long past");
    assert.equal(got.length, 1);
  } finally {
    server.close();
  }
});
