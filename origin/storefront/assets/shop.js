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
      }
    };
    var timer = setInterval(tick, 1000);
  }
  // A form sent once is not sent again by a second click.
  document.addEventListener("submit", function (e) {
    var b = e.target.querySelector("button");
    if (b) { setTimeout(function () { b.disabled = true; }, 0); }
  });
})();
