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
  // The sale's report is read every two seconds while the event is on
  // sale, every ten once it is sold out (it is then the sale's record).
  const REPORT_EVERY = 2000, RECORD_EVERY = 10000;
  const SVG = "http://www.w3.org/2000/svg";

  // An action's outcome stays up for a few seconds over the polls' news.
  let heldUntil = 0;
  function say(text, bad, hold) {
    if (!hold && Date.now() < heldUntil) return;
    if (hold) heldUntil = Date.now() + 5000;
    // A live region announces every write, the same text included.
    if (status.textContent !== text) status.textContent = text;
    status.className = bad ? "bad" : "";
  }

  async function call(method, path, body) {
    // A stalled connection (a tunnel gone quiet) never answers: give up, so
    // that the status line says so and the next poll tries again. Past the
    // admin API's own 5 s, so that a change it answers is never given up on.
    const opts = { method, cache: "no-store", credentials: "same-origin", signal: AbortSignal.timeout(10000) };
    if (body !== undefined) {
      opts.headers = { "Content-Type": "application/json" };
      opts.body = JSON.stringify(body);
    }
    const res = await fetch(path, opts);
    const data = await res.json().catch(() => null);
    if (!res.ok) {
      const err = new Error((data && (data.message || data.error)) || res.status + " " + res.statusText);
      err.code = data && data.error;
      err.data = data;
      throw err;
    }
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
    const c = { id, path: "/waitroom/events/" + id + "/", state: null, loggedAt: 0, reportedAt: 0, stats: {}, flip: {} };
    c.badge = el("span", { class: "badge" });
    const dl = el("dl");
    for (const [k, label] of STATS) {
      c.stats[k] = el("dd", { "data-k": k }, "—");
      dl.append(el("div", {}, el("dt", {}, label), c.stats[k]));
    }
    c.by = el("input", { name: "raise_by", type: "number", min: "1", step: "1", value: "100" });
    c.to = el("input", { name: "set", type: "number", min: "0", step: "1" });
    c.reason = el("input", { name: "reason", type: "text", maxlength: "500", placeholder: "why (for the log)" });
    const button = (act, text) => el("button", { type: "button", "data-act": act }, text);
    c.raise = button("raise", "Raise watermark");
    c.set = button("set", "Set watermark");
    c.pause = button("pause", "Pause");
    c.soldOut = button("sold_out", "Mark sold out");
    const form = el("form", { "aria-label": "Change event " + id },
      el("label", {}, "Raise by", c.by), c.raise, el("label", {}, "Set to", c.to), c.set,
      c.pause, c.soldOut, el("label", {}, "Reason", c.reason));
    for (const b of [c.raise, c.set, c.pause, c.soldOut]) b.addEventListener("click", () => act(c, b));
    c.log = el("tbody");
    const table = el("table", {}, el("caption", {}, "Change log, newest first"),
      el("thead", {}, el("tr", {}, ...["Time", "Actor", "Field", "From", "To", "Reason"].map(h => el("th", { scope: "col" }, h)))), c.log);
    c.report = reportView(id);
    c.root = el("section", { id: "event-" + id, class: "event", "aria-labelledby": "title-" + id },
      el("h2", { id: "title-" + id }, "Event " + id, c.badge), dl, form, c.report.root, table);
    return c;
  }

  function show(c, ev, mine) {
    // When another change last flipped a toggle: a press just after may
    // have been aimed at its old label.
    for (const k of ["paused", "sold_out"]) if (!mine && c.state && c.state[k] !== ev[k]) c.flip[k] = Date.now();
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
      c.stats[k].title = stale ? "the origin has not published since " + clock(ev.inventory.at) : "";
      if (stale) c.stats[k].textContent += " (stale)";
    }
    const phase = ev.sold_out ? "sold_out" : ev.paused ? "paused" : "open";
    c.badge.className = "badge " + phase;
    c.badge.textContent = { sold_out: "Sold out", paused: "Paused", open: "Open" }[phase];
    c.pause.textContent = ev.paused ? "Resume" : "Pause";
    c.soldOut.textContent = ev.sold_out ? "Clear sold out" : "Mark sold out";
  }

  function showLog(c, entries) {
    const rows = entries.map(e => el("tr", {},
      el("td", {}, clock(e.time)), el("td", {}, e.actor), el("td", {}, e.field),
      el("td", {}, String(e.from)), el("td", {}, String(e.to)), el("td", {}, e.reason || "")));
    c.log.replaceChildren(...rows);
  }

  async function refreshLog(c) {
    c.loggedAt = Date.now();
    try {
      showLog(c, await call("GET", c.path + "log?limit=10"));
    } catch (err) {
      c.log.replaceChildren(el("tr", {}, el("td", { colspan: "6" }, "change log: " + err.message)));
    }
  }

  // The sale's report (GET /waitroom/events/{id}/report) drawn as SVG:
  // the queue, the seats, and how long people waited. No library: a line
  // chart is a polyline per series over a shared time axis.
  const W = 480, H = 170, PAD = { l: 48, r: 8, t: 8, b: 22 };

  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    e.append(...kids);
    return e;
  }

  function figure(name, caption) {
    const chart = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "data-chart": name, "aria-label": caption });
    const legend = el("ul", { class: "legend" });
    return { chart, legend, root: el("figure", {}, el("figcaption", {}, caption), chart, legend) };
  }

  function reportView(id) {
    const v = { id };
    v.queue = figure("queue", "Queue: waiting, admitted, watermark");
    v.seats = figure("seats", "Seats: remaining and held");
    v.waits = figure("waits", "Wait from join to admission (seconds)");
    v.facts = el("dl", { class: "facts" });
    v.note = el("p", { class: "note" }, "No sale yet.");
    v.root = el("section", { class: "report", "aria-label": "Sale report of event " + id },
      el("h3", {}, "The sale's report"), v.note, el("div", { class: "charts" }, v.queue.root, v.seats.root, v.waits.root), v.facts);
    return v;
  }

  // axisTicks is a few round values from 0 to max.
  function axisTicks(max) {
    if (max <= 0) return [0];
    const raw = max / 4, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    // Whole numbers only: positions, seats and seconds.
    const step = Math.max(1, [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw));
    const out = [];
    for (let v = 0; ; v += step) {
      out.push(v);
      if (v >= max) break;
    }
    return out;
  }

  function clock(ms) { return new Date(ms).toLocaleTimeString("en-GB"); }

  // lines draws series over times (ms): [{key, label, values}], null values
  // left out. bands shades the times where a flag holds: [{key, label, on}].
  function lines(f, times, series, bands) {
    const x0 = times[0], x1 = Math.max(times[times.length - 1], x0 + 1000);
    const all = series.flatMap((s) => s.values.filter((v) => v !== null));
    const ticks = axisTicks(Math.max(1, ...all));
    const top = ticks[ticks.length - 1] || 1;
    const x = (t) => PAD.l + ((t - x0) / (x1 - x0)) * (W - PAD.l - PAD.r);
    const y = (v) => H - PAD.b - (v / top) * (H - PAD.t - PAD.b);
    const kids = [];
    for (const b of bands || []) {
      for (let i = 0; i < times.length; i++) {
        if (!b.on[i]) continue;
        let j = i;
        while (j + 1 < times.length && b.on[j + 1]) j++;
        const right = j + 1 < times.length ? times[j + 1] : times[j] + 1000;
        kids.push(svg("rect", { class: "band " + b.key, "data-band": b.key, x: x(times[i]), y: PAD.t,
          width: Math.max(1, x(Math.min(right, x1)) - x(times[i])), height: H - PAD.t - PAD.b }));
        i = j;
      }
    }
    for (const v of ticks) {
      kids.push(svg("line", { class: "grid", x1: PAD.l, x2: W - PAD.r, y1: y(v), y2: y(v) }));
      kids.push(svg("text", { class: "tick", x: PAD.l - 4, y: y(v) + 4, "text-anchor": "end" }, num.format(v)));
    }
    kids.push(svg("text", { class: "tick", x: PAD.l, y: H - 6 }, clock(x0)));
    kids.push(svg("text", { class: "tick", x: W - PAD.r, y: H - 6, "text-anchor": "end" }, clock(x1)));
    for (const s of series) {
      const pts = [];
      s.values.forEach((v, i) => { if (v !== null) pts.push(x(times[i]).toFixed(1) + "," + y(v).toFixed(1)); });
      if (pts.length === 1) {
        const [cx, cy] = pts[0].split(",");
        kids.push(svg("circle", { class: "dot " + s.key, cx, cy, r: 3 }));
      }
      kids.push(svg("polyline", { class: "series " + s.key, "data-series": s.key, points: pts.join(" ") },
        svg("title", {}, s.label)));
    }
    f.chart.replaceChildren(...kids);
    const last = (s) => { for (let i = s.values.length - 1; i >= 0; i--) if (s.values[i] !== null) return s.values[i]; return null; };
    f.legend.replaceChildren(
      ...series.map((s) => el("li", { class: s.key }, s.label + ": " + (last(s) === null ? "—" : num.format(last(s))))),
      ...(bands || []).filter((b) => b.on.some(Boolean)).map((b) => el("li", { class: "band " + b.key }, b.label)));
  }

  // bars draws the wait percentiles as horizontal bars.
  function bars(f, waits) {
    const rows = [["p50", "half"], ["p90", "nine in ten"], ["p99", "99 in 100"]];
    const ticks = axisTicks(Math.max(1, ...rows.map(([k]) => waits[k] || 0)));
    const top = ticks[ticks.length - 1] || 1;
    const x = (v) => PAD.l + (v / top) * (W - PAD.l - PAD.r - 40);
    const band = (H - PAD.t - PAD.b) / rows.length;
    const kids = [];
    for (const v of ticks) {
      kids.push(svg("line", { class: "grid", x1: x(v), x2: x(v), y1: PAD.t, y2: H - PAD.b }));
      kids.push(svg("text", { class: "tick", x: x(v), y: H - 6, "text-anchor": "middle" }, num.format(v) + " s"));
    }
    rows.forEach(([k, label], i) => {
      const v = waits[k], yy = PAD.t + i * band + band * 0.2;
      kids.push(svg("text", { class: "tick", x: PAD.l - 4, y: yy + band * 0.35, "text-anchor": "end" }, k));
      if (v === null || v === undefined) return;
      kids.push(svg("rect", { class: "bar " + k, "data-bar": k, x: PAD.l, y: yy, width: Math.max(1, x(v) - PAD.l), height: band * 0.6 },
        svg("title", {}, label + " waited " + (v < 60 ? "≤ " : "~") + v + " s")));
      kids.push(svg("text", { class: "value", x: x(v) + 4, y: yy + band * 0.4 }, num.format(v) + " s"));
    });
    f.chart.replaceChildren(...kids);
    f.legend.replaceChildren(el("li", { class: "plain" }, waits.p50 === null ? "nobody admitted yet" : "from join to admission"));
  }

  function showReport(c, r) {
    const v = c.report, tl = r.timeline;
    v.note.textContent = tl.length
      ? (c.state && c.state.sold_out ? "The sale's record, " : "Live, ") + clock(tl[0].t) + " to " + clock(tl[tl.length - 1].t) + ", " + tl.length + " points."
      : "No sale yet: the report starts at the first arrival.";
    if (tl.length) {
      const times = tl.map(p => Date.parse(p.t));
      const col = (k) => tl.map((p) => (p[k] === undefined ? null : p[k]));
      lines(v.queue, times, [
        { key: "waiting", label: "Waiting", values: col("waiting") },
        { key: "admitted", label: "Admitted", values: col("admitted") },
        { key: "watermark", label: "Watermark", values: col("watermark") },
      ], [{ key: "sold_out", label: "Sold out", on: col("sold_out") }]);
      lines(v.seats, times, [
        { key: "remaining", label: "Remaining", values: col("remaining") },
        { key: "held", label: "Held", values: col("held") },
      ], [{ key: "all_held", label: "All held", on: col("all_held") }, { key: "sold_out", label: "Sold out", on: col("sold_out") }]);
    }
    bars(v.waits, r.wait_seconds);
    const facts = [
      ["Arrivals", tl.length ? num.format(tl[tl.length - 1].arrivals) : "—"],
      ["Abandoned", num.format(r.abandoned)],
      ["Refused: join rate", num.format(r.refused.join_rate)],
      ["Refused: challenge", num.format(r.refused.challenge)],
      ["Changes", num.format(r.changes.length)],
    ];
    if (r.lottery) {
      facts.push(["Lottery commitment", r.lottery.commitment.slice(0, 16) + "…"]);
      facts.push(["Lottery seed", r.lottery.seed ? r.lottery.seed.slice(0, 16) + "…" : "not drawn yet"]);
    }
    v.facts.replaceChildren(...facts.map(([k, val]) => el("div", {}, el("dt", {}, k), el("dd", { "data-r": k }, val))));
  }

  async function refreshReport(c) {
    c.reportedAt = Date.now();
    try {
      showReport(c, await call("GET", c.path + "report"));
    } catch (err) {
      c.report.note.textContent = "report: " + err.message;
    }
  }

  async function act(c, b) {
    const what = b.dataset.act;
    const reason = c.reason.value.trim() || "staff console";
    let req;
    if (what === "raise") {
      const by = Number(c.by.value);
      // Past 2^53 the number sent is not the number typed.
      if (!Number.isSafeInteger(by) || by < 1) { say("Raise by a whole number of positions, 1 or more.", true, true); return; }
      req = ["watermark", { raise_by: by, reason }];
    } else if (what === "set") {
      const to = c.to.value.trim() === "" ? NaN : Number(c.to.value);
      if (!Number.isSafeInteger(to) || to < 0) { say("Set the watermark to a whole number of positions, 0 or more.", true, true); return; }
      const from = c.state.watermark;
      // Lowering takes admission back from people who had it (api.md §4).
      if (to < from && !confirm("Lower event " + c.id + "'s watermark from " + num.format(from) + " to " + num.format(to) +
        "? Visitors admitted above " + num.format(to) + " wait again, and the origin refuses their holds and payments until it is raised back.")) return;
      // Set from the watermark this page showed: one set by someone else
      // since is said, not overwritten.
      req = ["watermark", { set: to, if_watermark: from, reason }];
    } else {
      const k = what === "pause" ? "paused" : what;
      // Another desk's change just flipped the button under the pointer.
      if (Date.now() - c.flip[k] < 2000) {
        c.flip[k] = 0;
        say("Event " + c.id + " was just changed; press " + b.textContent + " again if you mean it.", true, true);
        return;
      }
      const to = !c.state[k];
      if (k === "sold_out" && to && !confirm("Mark event " + c.id + " sold out? Everyone waiting is told so.")) return;
      req = [what, { [k]: to, reason }];
    }
    try {
      const state = await call("POST", c.path + req[0], req[1]);
      show(c, Object.assign({}, c.state, state), 1);
      say("Event " + c.id + ": watermark " + num.format(state.watermark) + (state.paused ? ", paused" : ", not paused") + (state.sold_out ? ", sold out." : "."), false, true);
      refreshLog(c);
    } catch (err) {
      if (err.code === "watermark_changed" && err.data.state) {
        show(c, Object.assign({}, c.state, err.data.state));
        say("Event " + c.id + ": the watermark was changed to " + num.format(err.data.state.watermark) +
          " meanwhile; nothing was set. Check it and press Set watermark again if you mean it.", true, true);
        refreshLog(c);
        return;
      }
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
        if (Date.now() - c.reportedAt >= (ev.sold_out ? RECORD_EVERY : REPORT_EVERY)) refreshReport(c);
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
