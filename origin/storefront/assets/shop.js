// Progressive enhancement only: the pages work without it.
(function () {
  "use strict";
  // The hold's countdown: the figure ticks every second; the live region
  // (read out by screen readers) changes once a minute, and every 15 s in
  // the last minute.
  var left = document.getElementById("left"), live = document.getElementById("countdown");
  if (left && live) {
    var end = Date.now() + 1000 * Number(left.getAttribute("data-seconds"));
    var said = "";
    var tick = function () {
      var s = Math.max(0, Math.round((end - Date.now()) / 1000));
      var text = Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");
      left.textContent = text;
      var say = s === 0 ? live.getAttribute("data-expired") :
        (s > 60 ? s % 60 === 0 : s % 15 === 0) ? live.getAttribute("data-label") + ": " + text : said;
      if (say !== said) { live.textContent = say; said = say; }
      if (s === 0) {
        clearInterval(timer);
        var pay = document.getElementById("pay-button");
        if (pay) { pay.disabled = true; }
        // Say it in words where everyone sees it, as the page does once
        // loaded again: not only 0:00 and a greyed button.
        var main = document.getElementById("main");
        if (main && !document.getElementById("expired")) {
          var note = document.createElement("p");
          note.className = "error";
          note.id = "expired";
          note.setAttribute("role", "alert");
          note.textContent = live.getAttribute("data-expired");
          main.insertBefore(note, main.firstChild);
          live.textContent = "";
        }
      }
    };
    var timer = setInterval(tick, 1000);
  }
  // A payment just declined may still go through: its booking is looked
  // at as its own page would, and the buyer taken there (in place of this
  // answer, so Back finds the hold booked) unless another card was sent.
  var dec = document.querySelector("[data-recheck]");
  if (dec && window.fetch) {
    var at = function (n) { return 1000 * Number(dec.getAttribute("data-recheck-" + n)); };
    var url = dec.getAttribute("data-recheck"), until = Date.now() + at("seconds");
    var watching = document.createElement("span");
    watching.id = "watching";
    watching.textContent = " " + dec.getAttribute("data-watching");
    dec.appendChild(watching);
    var again = function () { if (Date.now() < until) { setTimeout(look, at("every")); } else { watching.remove(); } };
    var look = function () {
      fetch(url, { cache: "no-store" }).then(function (r) { return r.text(); }).then(function (html) {
        if (/data-status="(confirmed|payment_pending)"/.test(html) && !document.querySelector("[data-sent]")) { location.replace(url); } else { again(); }
      }, again);
    };
    again();
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
  // The page the browser shows again from its back-forward cache (the
  // back button) was left as it was when the form went: its button works
  // again. A page whose state moves on without it (the hold: paid for,
  // given back or run out meanwhile) is loaded again instead.
  window.addEventListener("pageshow", function (e) {
    if (!e.persisted) { return; }
    if (document.querySelector("[data-reload-on-back]")) {
      location.reload();
      return;
    }
    var sent = document.querySelectorAll("button[data-sent]");
    for (var i = 0; i < sent.length; i++) {
      sent[i].disabled = false;
      sent[i].removeAttribute("data-sent");
    }
  });
})();
