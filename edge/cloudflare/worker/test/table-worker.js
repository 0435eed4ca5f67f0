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
      const state = { ...row.state, sold_out_pages: table.sold_out_pages };
      const headers = new Headers({ Accept: row.accept });
      if (row.accept_language) {
        headers.set("Accept-Language", row.accept_language);
      }
      if (row.header_token) {
        headers.set("X-Waitroom-Token", row.header_token);
      }
      const cookies = (row.cookies ?? []).map((v) => `waitroom_${state.event}=${v}`);
      if (row.lang_cookie) {
        cookies.push(`waitroom_lang=${row.lang_cookie}`);
      }
      if (cookies.length > 0) {
        headers.set("Cookie", cookies.join("; "));
      }
      const request = new Request("http://tickets.test" + row.path, { headers });
      const d = await judge(request, state, keys, table.now_ms);
      const res = d.verdict === "sold_out" ? soldOut(request, state, d.tokenHolder) : null;
      if (!res) {
        requests.push({ passed_on: true, why: d.why ?? "page left to the gateway" });
        continue;
      }
      requests.push({
        passed_on: false,
        status: res.status,
        x_waitroom_status: res.headers.get("X-Waitroom-Status"),
        cache_control: res.headers.get("Cache-Control"),
        vary: res.headers.get("Vary"),
        content_type: res.headers.get("Content-Type"),
        content_language: res.headers.get("Content-Language") ?? undefined,
        body: await res.text(),
      });
    }
    return Response.json({ tokens, requests });
  },
};
