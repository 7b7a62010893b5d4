// jobgate dashboard: live updates over Server-Sent Events (/ui/events) and a throughput chart.
// Plain JavaScript, no build step (docs/dashboard.md, "Live updates").
"use strict";
(function () {
  var page = document.body.dataset.page;
  if (page !== "overview" && page !== "jobs") return;
  var rates = [];
  var busy = false, again = false;

  function refresh() {   // one fetch at a time; a change meanwhile fetches once more after
    if (busy) { again = true; return; }
    busy = true;
    var url, target;
    if (page === "overview") { url = "/ui/fragment/queues"; target = document.getElementById("queues"); }
    else { url = location.pathname + location.search + "&fragment=1"; target = document.getElementById("jobs"); }
    fetch(url, {credentials: "same-origin"}).then(function (r) {
      if (r.status === 401) { location.href = "/ui/login"; return null; }
      return r.ok ? r.text() : null;
    }).then(function (html) {
      if (html === null || html === undefined) return;
      if (page === "overview") target.innerHTML = html;
      else target.outerHTML = html;
    }).catch(function () {}).then(function () {
      busy = false;
      if (again) { again = false; refresh(); }
    });
  }

  function draw() {
    var c = document.getElementById("chart");
    if (!c) return;
    var g = c.getContext("2d"), w = c.width, h = c.height;
    var max = Math.max(10, Math.max.apply(null, rates));
    g.clearRect(0, 0, w, h);
    g.strokeStyle = "#ccc"; g.beginPath(); g.moveTo(0, h - 0.5); g.lineTo(w, h - 0.5); g.stroke();
    g.fillStyle = "#666"; g.font = "11px sans-serif"; g.fillText(Math.round(max) + "/s", 4, 12);
    g.strokeStyle = "#2a6fdb"; g.lineWidth = 2; g.beginPath();
    for (var i = 0; i < rates.length; i++) {
      var x = w - (rates.length - 1 - i) * (w / 239), y = h - 2 - (rates[i] / max) * (h - 16);
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    }
    g.stroke();
  }

  var queue = page === "jobs" ? document.getElementById("jobs").dataset.queue : null;
  var es = new EventSource("/ui/events");
  var live = document.getElementById("live");
  es.onopen = function () { live.classList.add("on"); };
  es.onerror = function () { live.classList.remove("on"); };
  es.onmessage = function (ev) {
    var m = JSON.parse(ev.data);
    rates.push(m.rate); if (rates.length > 240) rates.shift();   // 60 s at 4 ticks/s
    var r = document.getElementById("rate"); if (r) r.textContent = m.rate;
    draw();
    var changed = m.overflow > 0 ||
      (page === "overview" ? m.queues.length > 0 : m.queues.indexOf(queue) >= 0);
    if (changed) refresh();
  };
  draw();
})();
