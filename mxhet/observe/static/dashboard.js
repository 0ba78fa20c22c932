// mxhet dashboard: polls /api/state and redraws; never sends anything but GETs.
"use strict";
(function () {
  const pollMs = parseInt(document.body.dataset.pollMs, 10) || 1000;
  const rateHistory = {};   // slot -> {x: [elapsed s], y: [samples/s]}
  const ratioHistory = {};  // slot -> {x: [elapsed s], y: [compute ratio]}
  const KEEP = 600;
  let updates = 0;

  const fmt = (v, digits) => (v === null || v === undefined) ? "\u2013" : Number(v).toFixed(digits);
  const seconds = (s) => {
    if (s === null || s === undefined) return "\u2013";
    const m = Math.floor(s / 60);
    return m ? m + " min " + (s - 60 * m).toFixed(0) + " s" : s.toFixed(1) + " s";
  };
  const setText = (id, text) => { document.getElementById(id).textContent = text; };

  function push(history, slot, x, y) {
    if (y === null || y === undefined) return;
    const h = history[slot] || (history[slot] = {x: [], y: []});
    if (h.x.length && h.x[h.x.length - 1] === x) return;
    h.x.push(x); h.y.push(y);
    if (h.x.length > KEEP) { h.x.shift(); h.y.shift(); }
  }

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
  }

  function renderTable(devices) {
    const body = document.querySelector("#devices tbody");
    const rows = devices.map((d) => {
      const tr = document.createElement("tr");
      tr.dataset.slot = d.slot;
      tr.dataset.round = d.round;
      if (d.slowest) tr.className = "slowest";
      const ni = d.local_iters.slice(-8).map((p) => p[1]).join(" ");
      cell(tr, d.slot);
      cell(tr, d.host || "\u2013");
      cell(tr, d.rank === null ? "\u2013" : d.rank);
      cell(tr, d.context || "\u2013");
      cell(tr, d.slowdown === null ? "\u2013" : d.slowdown + "x");
      cell(tr, d.phase, "phase-" + d.phase);
      cell(tr, d.round, "round");
      cell(tr, ni || "\u2013", "ni");
      cell(tr, fmt(d.compute_ratio, 2));
      cell(tr, d.rtt_s === null ? "\u2013" : (1000 * d.rtt_s).toFixed(2) + " ms");
      cell(tr, fmt(d.samples_per_s, 0));
      cell(tr, d.slowest ? "slowest" : "");
      // a device that left stays listed, marked as gone (its last report's numbers, greyed)
      const present = d.present !== false;
      tr.dataset.present = present;
      if (!present) tr.classList.add("left");
      cell(tr, !present ? "left" + (d.left > 1 ? " (" + d.left + "x)" : "")
        : d.joined ? "rejoined" + (d.joined > 1 ? " (" + d.joined + "x)" : "") : "yes", "membership");
      return tr;
    });
    body.replaceChildren(...rows);
  }

  function renderEvents(events) {
    const list = document.getElementById("event-list");
    document.getElementById("no-events").hidden = events.length > 0;
    list.hidden = events.length === 0;
    const rows = events.map((e) => {
      const tr = document.createElement("tr");
      tr.dataset.event = e.event;
      tr.dataset.slot = e.slot;
      tr.className = "event-" + e.event;
      cell(tr, seconds(e.t_s));
      cell(tr, e.event === "leave" ? "left" : e.event === "join" ? "joined" : String(e.event));
      cell(tr, e.slot === null || e.slot === undefined ? "\u2013" : e.slot);
      cell(tr, e.round === null || e.round === undefined ? "\u2013" : e.round, "round");
      cell(tr, e.cause || "\u2013", "cause");
      return tr;
    });
    list.querySelector("tbody").replaceChildren(...rows);
  }

  const layout = (title, xtitle, ytitle) => ({
    title: {text: title, font: {size: 14}}, margin: {l: 55, r: 55, t: 35, b: 40},
    xaxis: {title: {text: xtitle}}, yaxis: {title: {text: ytitle}, rangemode: "tozero"},
    legend: {orientation: "h"},
  });
  const config = {displayModeBar: false, responsive: true};

  function renderCharts(state) {
    if (typeof Plotly === "undefined") return;
    const devices = state.devices;
    Plotly.react("chart-ni", devices.map((d) => ({
      x: d.local_iters.map((p) => p[0]), y: d.local_iters.map((p) => p[1]),
      name: "slot " + d.slot, mode: "lines+markers", type: "scatter",
    })), layout("local iterations per round (n\u1d62)", "round", "n\u1d62"), config);
    Plotly.react("chart-rate", devices.map((d) => ({
      x: (rateHistory[d.slot] || {x: []}).x.slice(), y: (rateHistory[d.slot] || {y: []}).y.slice(),
      name: "slot " + d.slot, mode: "lines+markers", type: "scatter",
    })), layout("samples/s per device", "elapsed (s)", "samples/s"), config);
    Plotly.react("chart-ratio", devices.map((d) => ({
      x: (ratioHistory[d.slot] || {x: []}).x.slice(), y: (ratioHistory[d.slot] || {y: []}).y.slice(),
      name: "slot " + d.slot, mode: "lines+markers", type: "scatter",
    })), layout("compute ratio per device", "elapsed (s)", "compute / (compute + wait)"), config);
    const job = state.job;
    Plotly.react("chart-accuracy", [
      {x: job.loss_curve.map((p) => p[0]), y: job.loss_curve.map((p) => p[1]), name: "training loss (rank 0)",
       mode: "lines", type: "scatter"},
      {x: job.accuracy_curve.map((p) => p[0]), y: job.accuracy_curve.map((p) => p[1]), name: "test accuracy",
       mode: "lines+markers", type: "scatter", yaxis: "y2"},
    ], Object.assign(layout("loss and evaluated accuracy", "training time (s)", "loss"),
      {yaxis2: {title: {text: "accuracy"}, overlaying: "y", side: "right", range: [0, 1], dtick: 0.2}}), config);
  }

  function render(state) {
    const job = state.job;
    setText("mode", job.mode);
    setText("status", job.status);
    setText("phase", job.phase || "\u2013");
    setText("elapsed", seconds(job.elapsed_s));
    setText("rounds", job.rounds);
    setText("rate", fmt(job.samples_per_s, 0));
    setText("accuracy", job.accuracy === null ? "not yet evaluated"
      : fmt(job.accuracy, 4) + " (at " + seconds(job.accuracy_at_s) + ")");
    setText("reporting", job.reporting + " of " + job.num_workers);
    setText("present", (job.present === undefined ? job.num_workers : job.present) + " of " + job.num_workers);
    document.body.dataset.rounds = job.rounds;
    for (const d of state.devices) {
      push(rateHistory, d.slot, job.elapsed_s, d.samples_per_s);
      push(ratioHistory, d.slot, job.elapsed_s, d.compute_ratio);
    }
    renderTable(state.devices);
    renderEvents(job.events || []);
    renderCharts(state);
    updates += 1;
    const u = document.getElementById("updates");
    u.dataset.count = updates;
    u.textContent = updates;
  }

  async function poll() {
    try {
      const response = await fetch("api/state", {cache: "no-store"});
      if (!response.ok) throw new Error("HTTP " + response.status);
      render(await response.json());
    } catch (err) {
      setText("status", "disconnected (the job has ended?)");
    }
    setTimeout(poll, pollMs);
  }
  poll();
})();
