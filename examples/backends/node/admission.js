// The Node recipe for a backend behind the waiting room: middleware that
// serves a request only when it carries a queue token the gateway issued for
// the event, in X-Waitroom-Token (HS256 JWT, key by kid). The token proves who
// the bearer is and that the gateway gave it its place, not that its turn
// came: a waiting visitor holds one too (docs/gateway.md, Checking admission
// in your backend).
//
//   import { waitroomAdmission, parseKeys } from "./admission.js";
//   const admitted = waitroomAdmission({ keys: parseKeys(process.env.WAITROOM_KEYS), event: 42 });
//   app.use("/checkout", admitted);            // Express or Connect
//   // plain node:http: admitted(req, res, () => checkout(req, res))
//
// An admitted request carries req.waitroom = { subject, position, event }.
// Anything else is answered 403 not_admitted, as the origin answers it.
import { jwtVerify } from "jose";

// The gateway's leeway for clock skew between its nodes and the backend
// (waitroom.DefaultLeeway), in seconds.
export const LEEWAY_SECONDS = 5;

const encoder = new TextEncoder();

// parseKeys reads WAITROOM_KEYS ("kid:secret,kid:secret"): the same keys the
// gateway signs with, the first one current, the others rotated out.
export function parseKeys(spec) {
  const keys = new Map();
  for (const part of String(spec ?? "").split(",")) {
    const i = part.indexOf(":");
    const kid = part.slice(0, i).trim();
    const secret = part.slice(i + 1).trim();
    if (i < 0 || !kid || !secret) throw new Error("WAITROOM_KEYS: want kid:secret[,kid:secret…]");
    keys.set(kid, encoder.encode(secret));
  }
  return keys;
}

// verifyToken resolves to { subject, position, event } when token is a queue
// token for event that the gateway would admit, and rejects otherwise.
// now (ms since the epoch) is for tests.
export async function verifyToken(token, { keys, event, now = Date.now() }) {
  const { payload } = await jwtVerify(
    token,
    (header) => {
      const secret = typeof header.kid === "string" ? keys.get(header.kid) : undefined;
      if (!secret) throw new Error("unknown or missing kid");
      return secret;
    },
    {
      algorithms: ["HS256"],
      issuer: "waitroom",
      requiredClaims: ["iss", "sub", "iat", "exp"],
      clockTolerance: LEEWAY_SECONDS,
      currentDate: new Date(now),
    },
  );
  // What jose leaves to the application: the claims of a queue token. The
  // gateway signs whole seconds only, and refuses any other time.
  for (const name of ["exp", "iat", "nbf"]) {
    if (payload[name] !== undefined && !Number.isSafeInteger(payload[name])) {
      throw new Error(`${name} is not a whole number of seconds`);
    }
  }
  const nowSeconds = now / 1000;
  if (payload.iat > nowSeconds + LEEWAY_SECONDS) throw new Error("iat is in the future");
  if (typeof payload.sub !== "string" || payload.sub === "") throw new Error("no subject");
  if (payload.evt !== event) throw new Error("a token of another event");
  if (payload.pre !== undefined && payload.pre !== null && typeof payload.pre !== "boolean") {
    throw new Error("pre is not a boolean");
  }
  if (payload.pre) throw new Error("a pre-queue token is never admitted");
  if (!Number.isSafeInteger(payload.pos) || payload.pos <= 0) throw new Error("no position");
  return { subject: payload.sub, position: payload.pos, event: payload.evt };
}

// waitroomAdmission is (req, res, next) middleware for event.
export function waitroomAdmission({ keys, event, now }) {
  return async (req, res, next) => {
    const token = req.headers["x-waitroom-token"];
    try {
      if (typeof token !== "string") throw new Error("no token");
      req.waitroom = await verifyToken(token, { keys, event, now: now?.() });
    } catch {
      res.writeHead(403, { "Content-Type": "application/json", "Cache-Control": "no-store" });
      res.end(JSON.stringify({ error: "not_admitted", message: "this page is reached through the waiting room" }));
      return;
    }
    next();
  };
}
