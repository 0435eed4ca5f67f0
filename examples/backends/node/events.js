// The Node recipe for a site that takes Waitroom's booking events
// (docs/api.md §17): checks the Waitroom-Signature header with node:crypto,
// then hands the event on.
//
//   import { waitroomEvents } from "./events.js";
//   const hook = waitroomEvents({
//     secret: process.env.WAITROOM_EVENTS_SECRET, // the origin's ORIGIN_EVENTS_SECRET
//     handle: async (event) => orders.apply(event), // dedup on event.id: an event may come twice
//   });
//   createServer((req, res) => (req.url === "/hooks/waitroom" ? hook(req, res) : notFound(res)));
//
// The signature covers the raw bytes of the body: read them before any JSON
// parser does (in Express, express.raw({ type: "application/json" })).
import { createHmac, timingSafeEqual } from "node:crypto";

export const HEADER = "waitroom-signature";
// How far the signature's time may be from the clock, in seconds.
export const TOLERANCE_SECONDS = 300;

// verifyEvent reports whether header signs body (a Buffer or a string,
// exactly as received) with secret, within tolerance of now (ms).
export function verifyEvent(header, body, secret, { now = Date.now(), tolerance = TOLERANCE_SECONDS } = {}) {
  let ts = "";
  const sigs = [];
  for (const part of String(header ?? "").split(",")) {
    const i = part.indexOf("=");
    if (i < 0) continue;
    const k = part.slice(0, i).trim();
    const v = part.slice(i + 1).trim();
    if (k === "t") ts = v;
    else if (k === "v1") sigs.push(v);
  }
  if (!/^\d+$/.test(ts) || sigs.length === 0) return false;
  if (Math.abs(now / 1000 - Number(ts)) > tolerance) return false;
  const want = createHmac("sha256", secret).update(`${ts}.`).update(body).digest();
  return sigs.some((s) => {
    if (!/^[0-9a-f]+$/i.test(s) || s.length !== want.length * 2) return false;
    return timingSafeEqual(Buffer.from(s, "hex"), want);
  });
}

// waitroomEvents is a node:http (or Express) handler: 400 for a bad
// signature or body, 500 when handle throws (the origin sends the event
// again), 204 once handled.
export function waitroomEvents({ secret, handle, now = () => Date.now() }) {
  return async (req, res) => {
    const chunks = [];
    let size = 0;
    for await (const chunk of req) {
      size += chunk.length;
      if (size > 1 << 20) return answer(res, 413);
      chunks.push(chunk);
    }
    const body = Buffer.concat(chunks);
    if (!verifyEvent(req.headers[HEADER], body, secret, { now: now() })) return answer(res, 400);
    let event;
    try {
      event = JSON.parse(body.toString("utf8"));
    } catch {
      return answer(res, 400);
    }
    try {
      await handle(event);
    } catch {
      return answer(res, 500);
    }
    answer(res, 204);
  };
}

function answer(res, status) {
  res.statusCode = status;
  res.end();
}
