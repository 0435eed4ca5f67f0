// What the edge decides about one request of an event, from the state the
// gateway published (edge/cloudflare/state.go): answer the sold-out 410
// itself, exactly as the gateway would (caddymodule/handler.go, pages.go),
// or pass the request on to the gateway. It only ever answers what the
// gateway would answer from the same state; whatever needs the gateway's
// store (positions for new arrivals, revocations, admission windows, the
// waiting page's figures) is passed on.

import { checkedKeys, verify } from "./token.js";

// The gateway's contract (waitroom/contract.go, caddymodule/handler.go).
export const TOKEN_HEADER = "X-Waitroom-Token";
export const STATUS_HEADER = "X-Waitroom-Status";
export const COOKIE_PREFIX = "waitroom_";
// The layout of the published state this Worker reads.
export const STATE_VERSION = 2;
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

// The most tokens of a request the gateway verifies (caddymodule/transport.go
// maxTokenCandidates). A request offering more is left to it: which of them
// it looks at is its choice, and the Worker's CPU is not spent on a flood.
export const MAX_TOKENS = 4;
// The longest value the gateway takes for a token (maxTokenLen); a longer
// one is no token at all.
export const MAX_TOKEN_LEN = 4096;

// signedNow is the start of the tokens the gateway signs now, with its
// signing key kid (waitroom.KeySet.SignedNow): their encoded header, as Go's
// encoding/json writes it.
export function signedNow(kid) {
  const header = JSON.stringify({ alg: "HS256", kid: String(kid), typ: "JWT" })
    .replace(/</g, "\\u003c").replace(/>/g, "\\u003e").replace(/&/g, "\\u0026")
    .replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
  let bin = "";
  for (const b of new TextEncoder().encode(header)) {
    bin += String.fromCharCode(b);
  }
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "") + ".";
}

// offeredTokens are a request's tokens in the order the gateway verifies
// them: the header's, then the cookies signed with the current key, then
// the others, each in the order sent; an empty value is none, and so is an
// overlong cookie.
export function offeredTokens(request, event, kids) {
  const usable = (v) => v !== "" && v.length <= MAX_TOKEN_LEN;
  const header = request.headers.get(TOKEN_HEADER) ?? "";
  const all = cookies(request.headers.get("Cookie"), COOKIE_PREFIX + event).filter(usable);
  const prefix = kids.length > 0 ? signedNow(kids[0]) : null;
  const current = all.filter((v) => prefix !== null && v.startsWith(prefix));
  const others = all.filter((v) => !(prefix !== null && v.startsWith(prefix)));
  return [...(header !== "" ? [header] : []), ...current, ...others];
}

const isCount = (v) => Number.isSafeInteger(v) && v >= 0;

// wellFormed tells whether state holds every field the edge reads, of the
// type the publisher writes (edge/cloudflare/state.go). A value written by
// hand or by another program is not believed: read loosely, "false" is
// true and a missing key_ids makes every token a forgery, so the edge
// would turn away buyers the gateway admits.
export function wellFormed(state) {
  const pages = state.sold_out_pages;
  return Number.isSafeInteger(state.event) && state.event > 0 &&
    typeof state.sold_out === "boolean" && typeof state.all_held === "boolean" && typeof state.paused === "boolean" &&
    isCount(state.watermark) && isCount(state.hard_cap) && isCount(state.sold_out_max_age) &&
    Array.isArray(state.key_ids) && state.key_ids.length > 0 &&
    state.key_ids.every((k) => typeof k === "string" && k !== "") &&
    (state.key_checks === undefined || state.key_checks === null ||
      (typeof state.key_checks === "object" && !Array.isArray(state.key_checks) &&
        Object.values(state.key_checks).every((c) => typeof c === "string"))) &&
    Array.isArray(state.languages) && state.languages.every((l) => typeof l === "string") &&
    (pages === null || pages === undefined ||
      (typeof pages === "object" && !Array.isArray(pages) && Object.values(pages).every((p) => typeof p === "string")));
}

const admits = (s, pos) => pos >= 1 && !s.paused && pos <= s.watermark && !beyondCap(s, pos);
const beyondCap = (s, pos) => s.hard_cap > 0 && pos > s.hard_cap;

// judge returns {verdict: "pass"} or {verdict: "sold_out", tokenHolder}
// for request of state's event at nowMs, with keys (kid → secret).
export async function judge(request, state, keys, nowMs) {
  if (!state || state.v !== STATE_VERSION) {
    return { verdict: "pass", why: "no state" };
  }
  if (!wellFormed(state)) {
    return { verdict: "pass", why: "malformed state" };
  }
  if (!state.sold_out) {
    // The edge answers 410 only for a state that cannot change back while
    // its KV value lags: an event the operator sold out. A hard cap can be
    // raised live, or is derived from the remaining seats at every poll,
    // so a token past it is the gateway's to judge.
    return { verdict: "pass", why: "open" };
  }
  if (state.all_held) {
    // No seat is left, but seats in live holds may come back: the gateway
    // keeps the visitor waiting and says so (docs/api.md §12).
    return { verdict: "pass", why: "all held" };
  }
  const event = state.event;
  const kids = state.key_ids;
  // A secret here that is not the gateway's (mistyped, or not yet the
  // rotated one) would make every token of its kid look forged, and its
  // admitted buyers would be told sold out.
  keys = await checkedKeys(keys, state.key_checks);
  let presented = false;
  let preQueue = null;
  const offered = offeredTokens(request, event, kids);
  if (offered.length > MAX_TOKENS) {
    return { verdict: "pass", why: "more tokens than the gateway looks at" };
  }
  let ticket = null;
  for (const raw of offered) {
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
    if (ticket.position > state.watermark) {
      return { verdict: "sold_out", tokenHolder: true };
    }
    if (beyondCap(state, ticket.position)) {
      // Below the watermark of a sold-out event, the cap alone keeps it
      // out, and a raised cap lets it in.
      return { verdict: "pass", why: "past a hard cap, which can move" };
    }
    return { verdict: "pass", why: "paused" };
  }
  if (preQueue) {
    return { verdict: "pass", why: "pre-queue" };
  }
  if (state.sold_out) {
    return { verdict: "sold_out", tokenHolder: presented };
  }
  return { verdict: "pass", why: "arrival" };
}

// The gateway's language choice (caddymodule/pages.go): the lang query
// parameter, then the waitroom_lang cookie, then Accept-Language.
export const LANG_PARAM = "lang";
export const LANG_COOKIE = "waitroom_lang";

const PLAIN_LANG_QUERY = /^\?lang=[A-Za-z0-9-]*$/;
const Q_VALUE = /^(0(\.[0-9]{0,3})?|1(\.0{0,3})?)$/;

// language is the page language the gateway would choose for request among
// langs (its default first), or null when the edge cannot be sure of it: a
// language the gateway lacks, which its matcher may still take for a
// related one, or a header it may read otherwise. A tag names a language
// by itself or by its primary subtag (de-CH is de), as the gateway's
// matcher takes them.
export function language(request, url, langs) {
  const exact = (tag) => langs.find((l) => l.toLowerCase() === tag.toLowerCase()) ??
    langs.find((l) => !l.includes("-") && l.toLowerCase() === tag.split("-")[0].toLowerCase());
  const explicit = [url.searchParams.get(LANG_PARAM) ?? "", ...cookies(request.headers.get("Cookie"), LANG_COOKIE).slice(0, 1)];
  for (const tag of explicit) {
    if (tag !== "") {
      return exact(tag) ?? null;
    }
  }
  const header = (request.headers.get("Accept-Language") ?? "").trim();
  if (header === "") {
    return langs[0];
  }
  let best = null;
  let bestQ = -1;
  for (const entry of header.split(",")) {
    const [tag, ...params] = entry.split(";").map((p) => p.trim());
    let q = 1;
    for (const param of params) {
      const m = /^q=(.*)$/.exec(param);
      if (!m || !Q_VALUE.test(m[1])) {
        return null;
      }
      q = Number(m[1]);
    }
    const lang = exact(tag);
    if (!lang || q === 0 || params.length > 1) {
      return null;
    }
    if (q > bestQ) {
      best = lang;
      bestQ = q;
    }
  }
  return best;
}

// soldOut is the gateway's 410: JSON when Accept names application/json,
// the gateway's own page otherwise; shared-cacheable only for a request
// that carried no token. It is null when the edge cannot give the page
// exactly as the gateway would (see language; a query the gateway would
// keep in the page's links otherwise).
export function soldOut(request, state, tokenHolder) {
  const headers = new Headers({
    [STATUS_HEADER]: "sold_out",
    "Cache-Control": (tokenHolder ? "private" : "public") + ", max-age=" + state.sold_out_max_age,
    "Vary": SOLD_OUT_VARY,
  });
  // Media types are case-insensitive (RFC 9110), as the gateway reads them.
  if ((request.headers.get("Accept") ?? "").toLowerCase().includes("application/json")) {
    headers.set("Content-Type", "application/json");
    return new Response(JSON.stringify({ status: "sold_out", event: state.event }) + "\n", { status: 410, headers });
  }
  const url = new URL(request.url);
  const langs = Array.isArray(state.languages) ? state.languages : [];
  const lang = language(request, url, langs);
  const page = lang && state.sold_out_pages?.[lang];
  if (!page || !(url.search === "" || PLAIN_LANG_QUERY.test(url.search))) {
    return null;
  }
  headers.set("Content-Type", "text/html; charset=utf-8");
  headers.set("Content-Language", lang);
  headers.append("Vary", "Accept-Language");
  // The page's links are queries alone ("?lang=de"): they keep whatever
  // path the page is at.
  return new Response(page, { status: 410, headers });
}
