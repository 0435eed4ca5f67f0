// Progressive enhancement only: the pages work without it.
(function () {
  "use strict";
  var byId = document.getElementById.bind(document);
  var page = function (url, then, failed) {
    fetch(url).then(function (r) { if (r.ok) { return r.text(); } throw r; }).then(then, failed);
  };
  // The hold's countdown ticks every second; its live region, read out by
  // screen readers, once a minute, every 15 s in the last one.
  var left = byId("left"), live = byId("countdown");
  if (left && live) {
    var end = Date.now() + 1000 * left.dataset.seconds, said = "";
    var tick = function () {
      var s = Math.max(0, Math.round((end - Date.now()) / 1000));
      var text = Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");
      left.textContent = text;
      var say = s === 0 ? "" :
        (s > 60 ? s % 60 === 0 : s % 15 === 0) ? live.dataset.label + ": " + text : said;
      if (say !== said) { live.textContent = say; said = say; }
      if (s === 0) {
        clearInterval(timer);
        // As the page loaded again says it: the hold ended, and what now.
        byId("main").className = "ended";
        document.title = byId("expired").textContent + " · " + document.title;
      }
    };
    var timer = setInterval(tick, 1000);
  }
  // A payment just declined may still go through: the buyer is taken to
  // its booking (in place of this answer, so Back finds the hold booked)
  // unless another card was sent.
  var dec = document.querySelector("[data-recheck]");
  if (dec) {
    var url = dec.dataset.recheck, until = Date.now() + 1000 * dec.dataset.recheckSeconds;
    var watching = dec.appendChild(document.createElement("span"));
    watching.id = "watching";
    watching.textContent = " " + dec.dataset.watching;
    var again = function () { if (Date.now() < until) { setTimeout(look, 1000 * dec.dataset.recheckEvery); } else { watching.remove(); } };
    var look = function () {
      page(url, function (html) {
        if (/data-status="(confirmed|payment_pending)"/.test(html) && !document.querySelector("[data-sent]")) { location.replace(url); } else { again(); }
      }, again);
    };
    again();
  }
  // A booking waiting on its payment or refund is loaded again once it
  // changes, not every few seconds (taking the focus, restarting a screen
  // reader) as without the script.
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
  // A form sent once is not sent again by a second click; its button comes
  // back after a while for a send stopped on a slow line (the same key: the
  // same request).
  document.addEventListener("submit", function (e) {
    var b = e.target.querySelector("button");
    if (b) {
      setTimeout(function () { b.disabled = true; b.setAttribute("data-sent", ""); }, 0);
      setTimeout(function () { b.disabled = false; }, 8e3);
    }
  });
  // Back from the browser's cache: a sent button works again, a page whose
  // state moves on without it (the hold) is loaded again.
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
