// Runs the verdict table (edge/cloudflare/testdata/verdicts.json, bound as
// TABLE) through the Worker's own code inside workerd, at the table's
// time, and answers with what the code decided for every row.

import { parseKeys, verify } from "../src/token.js";
import { judge, soldOut } from "../src/judge.js";

export default {
  async fetch(_request, env) {
    const table = env.TABLE;
    const keys = parseKeys(table.keys);
    const kids = [...keys.keys()];
    const tokens = [];
    for (const row of table.tokens) {
      const t = await verify(row.token, row.event, keys, kids, table.now_ms);
      tokens.push(t ? { valid: true, pre_queue: t.preQueue, subject: t.subject, position: t.position } : { valid: false });
    }
    const requests = [];
    for (const row of table.requests) {
      const state = { ...row.state, sold_out_page: table.sold_out_page };
      const headers = new Headers({ Accept: row.accept });
      if (row.header_token) {
        headers.set("X-Waitroom-Token", row.header_token);
      }
      if (row.cookies) {
        headers.set("Cookie", row.cookies.map((v) => `waitroom_${state.event}=${v}`).join("; "));
      }
      const request = new Request("http://tickets.test/buy", { headers });
      const d = await judge(request, state, keys, table.now_ms);
      if (d.verdict !== "sold_out") {
        requests.push({ passed_on: true, why: d.why });
        continue;
      }
      const res = soldOut(request, state, d.tokenHolder);
      requests.push({
        passed_on: false,
        status: res.status,
        x_waitroom_status: res.headers.get("X-Waitroom-Status"),
        cache_control: res.headers.get("Cache-Control"),
        vary: res.headers.get("Vary"),
        content_type: res.headers.get("Content-Type"),
        body: await res.text(),
      });
    }
    return Response.json({ tokens, requests });
  },
};
