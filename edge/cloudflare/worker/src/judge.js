// What the edge decides about one request of an event, from the state the
// gateway published (edge/cloudflare/state.go): answer the sold-out 410
// itself, exactly as the gateway would (caddymodule/handler.go, pages.go),
// or pass the request on to the gateway. It only ever answers what the
// gateway would answer from the same state; whatever needs the gateway's
// store (positions for new arrivals, revocations, admission windows, the
// waiting page's figures) is passed on.

import { verify } from "./token.js";

// The gateway's contract (waitroom/contract.go, caddymodule/handler.go).
export const TOKEN_HEADER = "X-Waitroom-Token";
export const STATUS_HEADER = "X-Waitroom-Status";
export const COOKIE_PREFIX = "waitroom_";
// The layout of the published state this Worker reads.
export const STATE_VERSION = 1;
// What the sold-out answer depends on: its form and whether the request
// carried a token.
const SOLD_OUT_VARY = "Accept, Cookie, " + TOKEN_HEADER;

// stateKey is the KV key of event's state (cloudflare.Key).
export const stateKey = (event) => "event-" + event;

// cookies returns the values of the cookies named name, in order, as Go's
// Request.CookiesNamed reads them.
export function cookies(header, name) {
  const out = [];
  for (const part of String(header ?? "").split(";")) {
    const item = part.trim();
    const eq = item.indexOf("=");
    if (eq < 0 || item.slice(0, eq).trim() !== name) {
      continue;
    }
    let value = item.slice(eq + 1).trim();
    if (value.length > 1 && value.startsWith('"') && value.endsWith('"')) {
      value = value.slice(1, -1);
    }
    out.push(value);
  }
  return out;
}

const admits = (s, pos) => pos >= 1 && !s.paused && pos <= s.watermark && !beyondCap(s, pos);
const beyondCap = (s, pos) => s.hard_cap > 0 && pos > s.hard_cap;

// judge returns {verdict: "pass"} or {verdict: "sold_out", tokenHolder}
// for request of state's event at nowMs, with keys (kid → secret).
export async function judge(request, state, keys, nowMs) {
  if (!state || state.v !== STATE_VERSION) {
    return { verdict: "pass", why: "no state" };
  }
  if (!state.sold_out && !(state.hard_cap > 0)) {
    // Nothing the edge could turn away.
    return { verdict: "pass", why: "open" };
  }
  const event = state.event;
  const kids = Array.isArray(state.key_ids) ? state.key_ids : [];
  let presented = false;
  let preQueue = null;
  const offered = [request.headers.get(TOKEN_HEADER) ?? "",
    ...cookies(request.headers.get("Cookie"), COOKIE_PREFIX + event)];
  let ticket = null;
  for (const raw of offered) {
    if (raw === "") {
      continue;
    }
    presented = true;
    const t = await verify(raw, event, keys, kids, nowMs);
    if (t === "unknown") {
      // Signed by a key the gateway has and this Worker was not given:
      // had it won, the gateway would judge by it.
      return { verdict: "pass", why: "key not deployed to the edge" };
    }
    if (t && t.preQueue) {
      preQueue ??= t;
    } else if (t) {
      ticket = t;
      break;
    }
  }
  if (ticket) {
    if (admits(state, ticket.position)) {
      return { verdict: "pass", why: "admitted" };
    }
    if (beyondCap(state, ticket.position) || (state.sold_out && ticket.position > state.watermark)) {
      return { verdict: "sold_out", tokenHolder: true };
    }
    return { verdict: "pass", why: "waiting" };
  }
  if (preQueue) {
    return { verdict: "pass", why: "pre-queue" };
  }
  if (state.sold_out) {
    return { verdict: "sold_out", tokenHolder: presented };
  }
  return { verdict: "pass", why: "arrival" };
}

// soldOut is the gateway's 410: JSON when Accept names application/json,
// the gateway's own page otherwise; shared-cacheable only for a request
// that carried no token.
export function soldOut(request, state, tokenHolder) {
  const headers = new Headers({
    [STATUS_HEADER]: "sold_out",
    "Cache-Control": (tokenHolder ? "private" : "public") + ", max-age=" + state.sold_out_max_age,
    "Vary": SOLD_OUT_VARY,
  });
  if ((request.headers.get("Accept") ?? "").includes("application/json")) {
    headers.set("Content-Type", "application/json");
    return new Response(JSON.stringify({ status: "sold_out", event: state.event }) + "\n", { status: 410, headers });
  }
  headers.set("Content-Type", "text/html; charset=utf-8");
  return new Response(state.sold_out_page, { status: 410, headers });
}
