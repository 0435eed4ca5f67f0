// Progressive enhancement only: the pages work without it.
(function () {
  "use strict";
  var page = function (url, then, failed) {
    fetch(url, { cache: "no-store" }).then(function (r) { if (r.ok) { return r.text(); } throw r; }).then(then, failed);
  };
  // The hold's countdown: the figure ticks every second; the live region
  // (read out by screen readers) changes once a minute, every 15 s in the
  // last one.
  var left = document.getElementById("left"), live = document.getElementById("countdown");
  if (left && live) {
    var end = Date.now() + 1000 * left.dataset.seconds, said = "";
    var tick = function () {
      var s = Math.max(0, Math.round((end - Date.now()) / 1000));
      var text = Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");
      left.textContent = text;
      var say = s === 0 ? live.dataset.expired :
        (s > 60 ? s % 60 === 0 : s % 15 === 0) ? live.dataset.label + ": " + text : said;
      if (say !== said) { live.textContent = say; said = say; }
      if (s === 0) {
        clearInterval(timer);
        var pay = document.getElementById("pay-button");
        if (pay) { pay.disabled = true; }
        // In words where everyone looks, as the page loaded again says it.
        document.getElementById("main").insertAdjacentHTML("afterbegin", '<p class="error" id="expired" role="alert"></p>');
        document.getElementById("expired").textContent = live.dataset.expired;
        live.textContent = "";
      }
    };
    var timer = setInterval(tick, 1000);
  }
  // A payment just declined may still go through: the buyer is taken to
  // its booking (in place of this answer, so Back finds the hold booked)
  // unless another card was sent.
  var dec = document.querySelector("[data-recheck]");
  if (dec) {
    var at = function (n) { return 1000 * dec.getAttribute("data-recheck-" + n); };
    var url = dec.dataset.recheck, until = Date.now() + at("seconds");
    var watching = dec.appendChild(document.createElement("span"));
    watching.id = "watching";
    watching.textContent = " " + dec.dataset.watching;
    var again = function () { if (Date.now() < until) { setTimeout(look, at("every")); } else { watching.remove(); } };
    var look = function () {
      page(url, function (html) {
        if (/data-status="(confirmed|payment_pending)"/.test(html) && !document.querySelector("[data-sent]")) { location.replace(url); } else { again(); }
      }, again);
    };
    again();
  }
  // A booking waiting on its payment or refund is loaded again once it
  // says something else: not every few seconds, as without the script,
  // which takes the keyboard's focus and starts a screen reader over.
  var w = document.querySelector("[data-watch]");
  if (w) {
    setInterval(function () {
      page(location.href, function (html) {
        var m = /data-watch="([^"]*)"/.exec(html);
        if (!m || m[1] !== w.dataset.watch) { location.reload(); }
      }, function () {});
    }, 1000 * w.dataset.every);
  }
  // The server writes times in UTC; the buyer reads them in their own zone.
  document.querySelectorAll("time[datetime]").forEach(function (el) {
    el.title = el.textContent;
    el.textContent = new Date(el.getAttribute("datetime")).toLocaleTimeString(document.documentElement.lang, { timeZoneName: "short" });
  });
  // A form sent once is not sent again by a second click.
  document.addEventListener("submit", function (e) {
    var b = e.target.querySelector("button");
    if (b) { setTimeout(function () { b.disabled = true; b.setAttribute("data-sent", ""); }, 0); }
  });
  // A page Back restores from the browser's cache: its sent button works
  // again, and a page whose state moves on without it (the hold) is loaded
  // again.
  window.addEventListener("pageshow", function (e) {
    if (!e.persisted) { return; }
    if (document.querySelector("[data-reload-on-back]")) {
      location.reload();
      return;
    }
    document.querySelectorAll("button[data-sent]").forEach(function (b) {
      b.disabled = false;
      b.removeAttribute("data-sent");
    });
  });
})();
