// The waiting room at Cloudflare's edge (docs/edge.md). For a request of a
// guarded event it reads the event's state, which the gateway publishes to
// the WAITROOM_STATE KV namespace, and answers the sold-out 410 itself
// whenever the gateway would; everything else goes on to the origin, the
// gateway fleet, which judges it again in full.
//
// Bindings: WAITROOM_STATE (KV namespace), WAITROOM_KEYS (secret, the
// gateway's "kid:secret,…"), WAITROOM_ROUTES (a JSON object of path
// prefixes to event ids; the longest prefix wins).

import { parseKeys } from "./token.js";
import { judge, soldOut, stateKey } from "./judge.js";

export default {
  async fetch(request, env) {
    const event = eventOf(new URL(request.url).pathname, env.WAITROOM_ROUTES);
    if (event === null) {
      return fetch(request);
    }
    let state = null;
    try {
      state = await env.WAITROOM_STATE.get(stateKey(event), { type: "json" });
    } catch (err) {
      // The gateway judges on its own; the edge only saves it work.
      console.error(`waitroom: reading the state of event ${event}: ${err}`);
    }
    if (state && state.event !== event) {
      state = null;
    }
    const d = await judge(request, state, keysOf(env.WAITROOM_KEYS), Date.now());
    const answer = d.verdict === "sold_out" && soldOut(request, state, d.tokenHolder);
    return answer || fetch(request);
  },
};

// eventOf is the event of the route with the longest prefix of path; null
// when there is none, or when that route's event is null (a path the
// gateway does not guard inside one it does).
export function eventOf(path, routes) {
  if (typeof routes === "string") {
    routes = routesOf(routes);
  }
  let best = null;
  let bestLen = -1;
  for (const [prefix, event] of Object.entries(routes ?? {})) {
    if (path.startsWith(prefix) && prefix.length > bestLen) {
      best = event;
      bestLen = prefix.length;
    }
  }
  return Number.isSafeInteger(best) && best > 0 ? best : null;
}

// WAITROOM_ROUTES given as text (a dashboard variable), parsed, kept while
// the text stays the same.
let routesText = null;
let routes = {};

function routesOf(text) {
  if (text !== routesText) {
    routesText = text;
    routes = {};
    try {
      routes = JSON.parse(text);
    } catch (err) {
      // Throwing would fail every request of the zone; guarding nothing
      // leaves each to the gateway, which judges it in full.
      console.error(`waitroom: WAITROOM_ROUTES is not JSON, so no path is guarded: ${err.message}`);
    }
  }
  return routes;
}

// The parsed WAITROOM_KEYS, kept while the secret stays the same.
let keysText = null;
let keys = new Map();

function keysOf(text) {
  if (text !== keysText) {
    keysText = text;
    keys = new Map();
    try {
      keys = text ? parseKeys(text) : keys;
    } catch (err) {
      // Without keys every token is left to the gateway.
      console.error(`waitroom: ${err.message}`);
    }
  }
  return keys;
}
