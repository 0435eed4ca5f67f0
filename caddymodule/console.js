"use strict";
// Polls GET /waitroom/live every second and the change logs every five;
// changes go through the admin routes. Every request is to this page's own
// origin, so Caddy's origin check of the admin endpoint judges it.
(() => {
  const events = document.getElementById("events");
  const status = document.getElementById("status");
  const cards = new Map();
  const num = new Intl.NumberFormat("en");
  const LOG_EVERY = 5000;

  // An action's outcome stays up for a few seconds over the polls' news.
  let heldUntil = 0;
  function say(text, bad, hold) {
    if (!hold && Date.now() < heldUntil) return;
    if (hold) heldUntil = Date.now() + 5000;
    status.textContent = text;
    status.className = bad ? "bad" : "";
  }

  async function call(method, path, body) {
    const opts = { method, cache: "no-store", credentials: "same-origin" };
    if (body !== undefined) {
      opts.headers = { "Content-Type": "application/json" };
      opts.body = JSON.stringify(body);
    }
    const res = await fetch(path, opts);
    const data = await res.json().catch(() => null);
    if (!res.ok) throw new Error((data && (data.message || data.error)) || res.status + " " + res.statusText);
    return data;
  }

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    e.append(...kids);
    return e;
  }

  const STATS = [
    ["arrivals_per_second", "Arrivals/s"], ["waiting", "Waiting"], ["watermark", "Watermark"],
    ["admitted", "Admitted"], ["last_position", "Last position"], ["hard_cap", "Hard cap"],
    ["remaining", "Seats remaining"], ["held", "Seats held"],
  ];

  function card(id) {
    const c = { id, state: null, loggedAt: 0, stats: {} };
    c.badge = el("span", { class: "badge" });
    const dl = el("dl");
    for (const [k, label] of STATS) {
      c.stats[k] = el("dd", { "data-k": k }, "—");
      dl.append(el("div", {}, el("dt", {}, label), c.stats[k]));
    }
    c.by = el("input", { name: "raise_by", type: "number", min: "1", step: "1", value: "100" });
    c.reason = el("input", { name: "reason", type: "text", maxlength: "500", placeholder: "why (for the log)" });
    const button = (act, text) => el("button", { type: "button", "data-act": act }, text);
    c.raise = button("raise", "Raise watermark");
    c.pause = button("pause", "Pause");
    c.soldOut = button("sold_out", "Mark sold out");
    const form = el("form", { "aria-label": "Change event " + id },
      el("label", {}, "Raise by", c.by), c.raise, c.pause, c.soldOut, el("label", {}, "Reason", c.reason));
    form.addEventListener("submit", (e) => { e.preventDefault(); act(c, "raise"); });
    for (const b of [c.raise, c.pause, c.soldOut]) b.addEventListener("click", () => act(c, b.dataset.act));
    c.log = el("tbody");
    const table = el("table", {}, el("caption", {}, "Change log, newest first"),
      el("thead", {}, el("tr", {}, ...["Time", "Actor", "Field", "From", "To", "Reason"].map((h) => el("th", { scope: "col" }, h)))), c.log);
    c.root = el("section", { id: "event-" + id, class: "event", "aria-labelledby": "title-" + id },
      el("h2", { id: "title-" + id }, "Event " + id, c.badge), dl, form, table);
    return c;
  }

  function show(c, ev) {
    c.state = ev;
    const fmt = (v) => (v === null || v === undefined ? "—" : num.format(v));
    for (const [k] of STATS) {
      let v = ev[k];
      if (k === "arrivals_per_second") v = v === null || v === undefined ? null : Math.round(v * 10) / 10;
      if (k === "hard_cap" && !v) v = null;
      if (k === "remaining" || k === "held") v = ev.inventory ? ev.inventory[k] : null;
      c.stats[k].textContent = fmt(v);
    }
    // Figures the origin stopped refreshing are shown as such.
    const stale = ev.inventory && !ev.inventory.fresh;
    for (const k of ["remaining", "held"]) {
      c.stats[k].classList.toggle("stale", !!stale);
      c.stats[k].title = stale ? "the origin has not published since " + new Date(ev.inventory.at).toLocaleTimeString("en-GB") : "";
      if (stale) c.stats[k].textContent += " (stale)";
    }
    const phase = ev.sold_out ? "sold_out" : ev.paused ? "paused" : "open";
    c.badge.className = "badge " + phase;
    c.badge.textContent = { sold_out: "Sold out", paused: "Paused", open: "Open" }[phase];
    c.pause.textContent = ev.paused ? "Resume" : "Pause";
    c.soldOut.textContent = ev.sold_out ? "Clear sold out" : "Mark sold out";
  }

  function showLog(c, entries) {
    const rows = entries.map((e) => el("tr", {},
      el("td", {}, new Date(e.time).toLocaleTimeString("en-GB")), el("td", {}, e.actor), el("td", {}, e.field),
      el("td", {}, String(e.from)), el("td", {}, String(e.to)), el("td", {}, e.reason || "")));
    c.log.replaceChildren(...rows);
  }

  async function refreshLog(c) {
    c.loggedAt = Date.now();
    try {
      showLog(c, await call("GET", "/waitroom/events/" + c.id + "/log?limit=10"));
    } catch (err) {
      c.log.replaceChildren(el("tr", {}, el("td", { colspan: "6" }, "change log: " + err.message)));
    }
  }

  async function act(c, what) {
    const path = "/waitroom/events/" + c.id + "/";
    const reason = c.reason.value.trim() || "staff console";
    let req;
    if (what === "raise") {
      const by = Number(c.by.value);
      if (!Number.isInteger(by) || by < 1) { say("Raise by a whole number of positions, 1 or more.", true, true); return; }
      req = ["watermark", { raise_by: by, reason }];
    } else if (what === "pause") {
      req = ["pause", { paused: !c.state.paused, reason }];
    } else {
      const to = !c.state.sold_out;
      if (to && !window.confirm("Mark event " + c.id + " sold out? Everyone waiting is told so.")) return;
      req = ["sold_out", { sold_out: to, reason }];
    }
    try {
      const state = await call("POST", path + req[0], req[1]);
      show(c, Object.assign({}, c.state, state));
      say("Event " + c.id + ": " + req[0].replace("_", " ") + " changed.", false, true);
      refreshLog(c);
    } catch (err) {
      say("Event " + c.id + ": " + err.message, true, true);
    }
  }

  async function poll() {
    try {
      const list = await call("GET", "/waitroom/live");
      const seen = new Set();
      for (const ev of list) {
        seen.add(ev.event);
        let c = cards.get(ev.event);
        if (!c) {
          c = card(ev.event);
          cards.set(ev.event, c);
          events.append(c.root);
        }
        show(c, ev);
        if (Date.now() - c.loggedAt >= LOG_EVERY) refreshLog(c);
      }
      for (const [id, c] of cards) {
        if (!seen.has(id)) { c.root.remove(); cards.delete(id); }
      }
      say(list.length ? "Live: " + list.length + " event" + (list.length > 1 ? "s" : "") + "." : "No loaded config guards an event.");
    } catch (err) {
      say("Cannot read the events: " + err.message, true);
    }
    setTimeout(poll, 1000);
  }
  poll();
})();
