// Queue tokens, verified as the gateway's key set verifies them
// (waitroom/token.go): HS256 only, the key chosen by kid, iss "waitroom",
// exp and iat required, exp, iat and nbf judged with a 5 s leeway at
// second precision, evt the event's, sub non-empty, pos positive unless
// the token is a pre-queue one (pre, no pos). The table in
// edge/cloudflare/testdata/verdicts.json, made from the Go code, holds the
// verdicts this must give.

export const ISSUER = "waitroom";
export const LEEWAY_MS = 5000;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

// parseKeys reads "kid:secret[,kid:secret…]", the form of the gateway's
// WAITROOM_KEYS, into a Map from kid to secret.
export function parseKeys(text) {
  const keys = new Map();
  for (const part of String(text ?? "").split(",")) {
    const item = part.trim();
    const colon = item.indexOf(":");
    if (colon <= 0 || colon === item.length - 1) {
      throw new Error("WAITROOM_KEYS: want kid:secret[,kid:secret…]");
    }
    keys.set(item.slice(0, colon), item.slice(colon + 1));
  }
  return keys;
}

// Imported HMAC keys, by secret, for the life of the isolate.
const imported = new Map();

function hmacKey(secret) {
  let key = imported.get(secret);
  if (!key) {
    key = crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
    imported.set(secret, key);
  }
  return key;
}

// What a key check signs (waitroom/keycheck.go, KeyCheck).
const KEY_CHECK_MESSAGE = "waitroom edge key check";

// Key checks, by secret, for the life of the isolate.
const checks = new Map();

// keyCheck is the gateway's KeyCheck of secret: the first 16 bytes of
// HMAC-SHA256(secret, KEY_CHECK_MESSAGE), in lower-case hex.
export function keyCheck(secret) {
  let check = checks.get(secret);
  if (!check) {
    check = crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"])
      .then((key) => crypto.subtle.sign("HMAC", key, encoder.encode(KEY_CHECK_MESSAGE)))
      .then((mac) => Array.from(new Uint8Array(mac, 0, 16), (b) => b.toString(16).padStart(2, "0")).join(""));
    checks.set(secret, check);
  }
  return check;
}

// checkedKeys is keys without the kids whose secret here is not the
// gateway's: the check published for the kid (the state's key_checks) is
// not this secret's. Their tokens are then the gateway's to judge, as a
// kid this Worker lacks; a state without checks (an older gateway) leaves
// keys as they are.
export async function checkedKeys(keys, published) {
  if (!published) {
    return keys;
  }
  let out = keys;
  for (const [kid, secret] of keys) {
    const want = published[kid];
    if (typeof want === "string" && want !== (await keyCheck(secret))) {
      if (out === keys) {
        out = new Map(keys);
      }
      out.delete(kid);
    }
  }
  return out;
}

const BASE64URL = /^[A-Za-z0-9_-]*$/;

// b64url decodes unpadded base64url as Go's base64.RawURLEncoding does
// (no padding, no other alphabet); null when it is not.
function b64url(segment) {
  if (!BASE64URL.test(segment) || segment.length % 4 === 1) {
    return null;
  }
  const bin = atob(segment.replace(/-/g, "+").replace(/_/g, "/"));
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) {
    bytes[i] = bin.charCodeAt(i);
  }
  return bytes;
}

function json(bytes) {
  try {
    return JSON.parse(decoder.decode(bytes));
  } catch {
    return undefined;
  }
}

const isObject = (v) => typeof v === "object" && v !== null && !Array.isArray(v);

// numericDate is a claim's time in ms; undefined when absent (or null), NaN
// when it is not a whole number of seconds, which the gateway refuses too
// (it signs only whole seconds).
function numericDate(v) {
  if (v === undefined || v === null) {
    return undefined;
  }
  if (!Number.isSafeInteger(v)) {
    return NaN;
  }
  return v * 1000;
}

// claimsOf checks the types the gateway decodes the claims into; null when
// one does not fit.
function claimsOf(c) {
  if (!isObject(c)) {
    return null;
  }
  const str = (v) => v === undefined || v === null || typeof v === "string";
  const int = (v) => v === undefined || v === null || Number.isSafeInteger(v);
  const aud = c.aud;
  const audOK = aud === undefined || aud === null || typeof aud === "string" ||
    (Array.isArray(aud) && aud.every((a) => typeof a === "string"));
  if (!str(c.iss) || !str(c.sub) || !str(c.jti) || !audOK || !int(c.evt) || !int(c.pos) ||
      !(c.pre === undefined || c.pre === null || typeof c.pre === "boolean")) {
    return null;
  }
  const out = {
    iss: c.iss ?? "", sub: c.sub ?? "", evt: c.evt ?? 0, pos: c.pos ?? 0, pre: c.pre ?? false,
    exp: numericDate(c.exp), iat: numericDate(c.iat), nbf: numericDate(c.nbf),
  };
  if (Number.isNaN(out.exp) || Number.isNaN(out.iat) || Number.isNaN(out.nbf)) {
    return null;
  }
  return out;
}

// verify judges raw for event at nowMs with keys (kid → secret). It returns
// the ticket ({subject, event, position, preQueue}) when the gateway would
// accept it, null when it would not, and "unknown" when raw is signed by a
// key the gateway has (kids) but keys lacks: only the gateway can judge it.
export async function verify(raw, event, keys, kids, nowMs) {
  const parts = String(raw).split(".");
  if (parts.length !== 3) {
    return null;
  }
  const [h, p, s] = parts.map(b64url);
  if (!h || !p || !s) {
    return null;
  }
  const header = json(h);
  if (!isObject(header) || header.alg !== "HS256" || typeof header.kid !== "string" || header.kid === "" ||
      !kids.includes(header.kid)) {
    return null;
  }
  const secret = keys.get(header.kid);
  if (secret === undefined) {
    return "unknown";
  }
  const signed = encoder.encode(parts[0] + "." + parts[1]);
  if (!(await crypto.subtle.verify("HMAC", await hmacKey(secret), s, signed))) {
    return null;
  }
  const c = claimsOf(json(p));
  if (!c) {
    return null;
  }
  const ok =
    c.exp !== undefined && nowMs < c.exp + LEEWAY_MS &&
    c.iat !== undefined && nowMs >= c.iat - LEEWAY_MS &&
    (c.nbf === undefined || nowMs >= c.nbf - LEEWAY_MS) &&
    c.iss === ISSUER &&
    c.sub !== "" &&
    c.evt > 0 &&
    (c.pre ? c.pos === 0 : c.pos > 0) &&
    c.evt === event;
  if (!ok) {
    return null;
  }
  return { subject: c.sub, event: c.evt, position: c.pos, preQueue: c.pre };
}
