// The recipe against the shared token table (edge/cloudflare/testdata/
// verdicts.json, written from the gateway's own key set): every token must
// be admitted exactly when the gateway would admit it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { waitroomAdmission, parseKeys, verifyToken } from "../admission.js";

const table = JSON.parse(
  readFileSync(new URL("../../../../edge/cloudflare/testdata/verdicts.json", import.meta.url), "utf8"),
);
const keys = parseKeys(table.keys);

test("every token of the shared table", async (t) => {
  for (const row of table.tokens) {
    await t.test(row.name, async () => {
      const admit = row.valid && !row.pre_queue;
      const got = await verifyToken(row.token, { keys, event: row.event, now: table.now_ms }).then(
        (v) => v,
        () => null,
      );
      if (admit) {
        assert.deepEqual(got, { subject: row.subject, position: row.position, event: row.event });
      } else {
        assert.equal(got, null, "refused by the gateway, so refused here");
      }
    });
  }
});

test("the middleware in a node:http server", async () => {
  const good = table.tokens.find((r) => r.valid && !r.pre_queue);
  const pre = table.tokens.find((r) => r.pre_queue);
  const admitted = waitroomAdmission({ keys, event: good.event, now: () => table.now_ms });
  const server = createServer((req, res) =>
    admitted(req, res, () => {
      res.end(`${req.waitroom.subject} ${req.waitroom.position}`);
    }),
  );
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}/checkout`;
  try {
    let res = await fetch(url, { headers: { "X-Waitroom-Token": good.token } });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), `${good.subject} ${good.position}`);

    for (const headers of [{}, { "X-Waitroom-Token": pre.token }, { "X-Waitroom-Token": "garbage" }]) {
      res = await fetch(url, { headers });
      assert.equal(res.status, 403);
      assert.deepEqual(await res.json(), {
        error: "not_admitted",
        message: "this page is reached through the waiting room",
      });
    }
  } finally {
    server.close();
  }
});
