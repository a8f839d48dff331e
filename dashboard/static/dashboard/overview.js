// The queue overview, kept live from /dashboard/stream (server-sent events).
// Plain browser JavaScript: no build step, no third-party code.
(function () {
  "use strict";

  const table = document.getElementById("tf-overview");
  if (!table || !window.EventSource) return;
  const body = table.tBodies[0];
  const rowTemplate = document.getElementById("tf-row-template");
  const live = document.getElementById("tf-live");
  const updatedAt = document.getElementById("tf-updated-at");
  const SVG_NS = "http://www.w3.org/2000/svg";

  function fmtRate(value) {
    return Number(value || 0).toFixed(2);
  }

  function fmtAge(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    if (seconds < 60) return seconds.toFixed(1) + " s";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + "m " + Math.floor(seconds % 60) + "s";
    return Math.floor(minutes / 60) + "h " + (minutes % 60) + "m";
  }

  function fmtPercent(ratio) {
    return Math.round(Number(ratio || 0) * 100) + "%";
  }

  function fmtRateLimit(q) {
    return q.rate_limit ? q.rate_limit + "/s (burst " + q.rate_burst + ")" : "unlimited";
  }

  // A polyline of the last samples, scaled to the largest one (flat at the bottom when idle).
  function drawSparkline(svg, points) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (!points || points.length < 2) return;
    const width = 120, height = 24, pad = 2;
    const max = Math.max.apply(null, points.concat([0.001]));
    const step = (width - 2 * pad) / (points.length - 1);
    const coords = points.map(function (value, i) {
      const x = pad + i * step;
      const y = height - pad - (value / max) * (height - 2 * pad);
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    const line = document.createElementNS(SVG_NS, "polyline");
    line.setAttribute("points", coords.join(" "));
    line.setAttribute("class", "tf-spark-line");
    svg.appendChild(line);
    svg.setAttribute("data-points", points.length);
  }

  function rowFor(q) {
    let row = body.querySelector('tr[data-queue="' + CSS.escape(q.queue) + '"]');
    if (row) return row;
    const empty = body.querySelector("tr.tf-empty");
    if (empty) empty.remove();
    row = rowTemplate.content.firstElementChild.cloneNode(true);
    row.setAttribute("data-queue", q.queue);
    const link = row.querySelector('[data-link="queue"]');
    link.textContent = q.queue;
    link.href = table.dataset.tasksUrl + "?queue__id__exact=" + encodeURIComponent(q.id);
    row.querySelector('[data-link="dlq"]').href = table.dataset.dlqUrl + "?queue__id__exact=" + encodeURIComponent(q.id);
    // Keep the table in name order, like the server renders it.
    const after = Array.prototype.find.call(body.rows, function (r) {
      return r.getAttribute("data-queue") > q.queue;
    });
    body.insertBefore(row, after || null);
    return row;
  }

  function setField(row, name, text) {
    const cell = row.querySelector('[data-field="' + name + '"]');
    if (cell && cell.textContent !== String(text)) {
      cell.textContent = text;
      cell.classList.remove("tf-changed");
      void cell.offsetWidth; // restart the highlight animation
      cell.classList.add("tf-changed");
    }
  }

  function render(snapshot) {
    const seen = new Set();
    snapshot.queues.forEach(function (q) {
      seen.add(q.queue);
      const row = rowFor(q);
      Object.keys(q.depth).forEach(function (status) {
        setField(row, "depth." + status, q.depth[status]);
      });
      setField(row, "dlq_depth", q.dlq_depth);
      setField(row, "completed_per_sec", fmtRate(q.completed_per_sec));
      setField(row, "enqueued_per_sec", fmtRate(q.enqueued_per_sec));
      setField(row, "error_rate", fmtPercent(q.error_rate));
      setField(row, "oldest_pending_age_seconds", fmtAge(q.oldest_pending_age_seconds));
      setField(row, "rate_limit", fmtRateLimit(q));
      row.classList.toggle("tf-paused", !!q.paused);
      row.querySelector('[data-field="paused"]').hidden = !q.paused;
      row.querySelector('[data-field="push"]').hidden = !q.push;
      drawSparkline(row.querySelector('[data-field="throughput_history"]'), q.throughput_history);
    });
    Array.prototype.slice.call(body.rows).forEach(function (row) {
      const name = row.getAttribute("data-queue");
      if (name !== null && !seen.has(name)) row.remove();
    });
    updatedAt.dateTime = snapshot.at;
    updatedAt.textContent = snapshot.at.slice(11, 19);
  }

  function setState(state, text) {
    live.dataset.state = state;
    live.textContent = text;
  }

  const source = new EventSource(table.dataset.streamUrl);
  source.addEventListener("open", function () {
    setState("live", "live");
  });
  source.addEventListener("stats", function (event) {
    setState("live", "live");
    render(JSON.parse(event.data));
  });
  source.addEventListener("error", function () {
    // EventSource reconnects by itself (the server asks for 2 s); say so meanwhile.
    setState("reconnecting", source.readyState === EventSource.CLOSED ? "disconnected" : "reconnecting…");
  });
})();
