// The replay report's charts: one uPlot chart per group of GPUs alike (its first GPU's) with the verdict
// episodes as bands and the ledger's state of each second as a band under it. Data: the JSON in
// #report-data (exporter/offline/report.py).
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const holder = document.getElementById("gpus");
  const BAND_PX = 16; // ledger band height
  const STRIP_PX = 14; // verdict label strip at the top of the plot

  function clock(t) {
    if (data.start == null || t == null) return "";
    return new Date((data.start + t) * 1000).toISOString().substring(11, 19);
  }
  // a range of days is read by date and time (UTC); a shorter one by seconds and time of day
  function dateTime(t) {
    return new Date((data.start + t) * 1000).toISOString().substring(0, 19).replace("T", " ");
  }
  function when(t) {
    if (t == null) return "-";
    if (data.dated) return dateTime(t);
    const c = clock(t);
    return Math.round(t) + " s" + (c ? " (" + c + ")" : "");
  }
  function tick(t) {
    if (data.dated) {
      const text = dateTime(t); // "2026-11-30 14:03:51": the month-day and hour:minute on the axis
      return text.substring(5, 16);
    }
    return t < 60 ? t + " s" : Math.floor(t / 60) + ":" + String(Math.round(t % 60)).padStart(2, "0");
  }
  function rgba(hex, a) {
    const n = parseInt(hex.slice(1), 16);
    return "rgba(" + ((n >> 16) & 255) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
  }
  function fixed(digits, unit) {
    return (u, v) => (v == null ? "-" : v.toFixed(digits) + unit);
  }

  // verdict episodes, from when their loss began to when it stopped: a translucent band over the plot
  // and a labelled strip on top, marked where the verdict fired
  function drawEpisodes(u, gpu) {
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    const pr = uPlot.pxRatio;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    const lanes = {};
    gpu.episodes.forEach((e) => {
      if (!(e.kind in lanes)) lanes[e.kind] = Object.keys(lanes).length;
    });
    gpu.episodes.forEach((e) => {
      const kind = data.kinds[e.kind] || { label: e.kind, colour: "#888888" };
      const x0 = u.valToPos(e.start, "x", true);
      const x1 = u.valToPos(e.end == null ? data.seconds : e.end, "x", true);
      const y = top + lanes[e.kind] * STRIP_PX * pr;
      ctx.fillStyle = rgba(kind.colour, 0.13);
      ctx.fillRect(x0, top, x1 - x0, height);
      ctx.fillStyle = kind.colour;
      ctx.fillRect(x0, y, x1 - x0, STRIP_PX * pr);
      ctx.fillStyle = "#ffffff";
      if (e.fired != null && e.fired > e.start) {
        // the band starts when the loss began; this mark is when the verdict fired
        ctx.fillRect(u.valToPos(e.fired, "x", true) - pr, y, 2 * pr, STRIP_PX * pr);
      }
      ctx.font = "bold " + 11 * pr + "px system-ui, sans-serif";
      ctx.textBaseline = "middle";
      ctx.fillText(kind.label, Math.max(x0, left) + 4 * pr, y + (STRIP_PX * pr) / 2);
    });
    ctx.restore();
  }

  // the ledger band: a canvas under the plot, aligned with its x scale
  function drawLedger(u, gpu, band) {
    const w = u.over.clientWidth;
    const pr = uPlot.pxRatio;
    band.style.marginLeft = u.over.style.left;
    band.style.width = w + "px";
    band.width = Math.round(w * pr);
    band.height = Math.round(BAND_PX * pr);
    const ctx = band.getContext("2d");
    ctx.clearRect(0, 0, band.width, band.height);
    gpu.ledger.forEach(([t0, t1, s]) => {
      const x0 = Math.max(0, u.valToPos(t0, "x"));
      const x1 = Math.min(w, u.valToPos(t1, "x"));
      if (x1 <= x0) return;
      ctx.fillStyle = data.stateColours[data.states[s]];
      ctx.fillRect(x0 * pr, 0, Math.max(1, (x1 - x0) * pr), band.height);
    });
  }

  function ledgerAt(gpu, t) {
    if (t == null) return null;
    for (const [t0, t1, s] of gpu.ledger) {
      if (t > t0 && t <= t1) return data.states[s];
    }
    return null;
  }

  function chart(gpu, width) {
    const section = document.createElement("div");
    section.className = "gpu";
    section.id = "gpu-" + gpu.gpu;
    const title = document.createElement("h3");
    title.textContent = gpu.label + (gpu.name ? " \u2014 " + gpu.name : "");
    section.appendChild(title);
    gpu.gpus.slice(1).forEach((other) => {
      const anchor = document.createElement("span"); // #gpu-N leads to the section showing GPU N
      anchor.id = "gpu-" + other;
      section.appendChild(anchor);
    });
    if (gpu.note) {
      const note = document.createElement("p");
      note.className = "dim small";
      note.textContent = gpu.note;
      section.appendChild(note);
    }
    holder.appendChild(section);
    if (!gpu.x.length) {
      const none = document.createElement("p");
      none.textContent = "no samples";
      section.appendChild(none);
      return null;
    }
    const formats = {
      util: fixed(0, " %"),
      sm: fixed(0, " %"),
      power: (u, v) =>
        v == null ? "-" : v.toFixed(0) + " %" + (gpu.tdp ? " (" + ((v * gpu.tdp) / 100).toFixed(0) + " W)" : ""),
      limit: (u, v) =>
        v == null ? "-" : v.toFixed(0) + " %" + (gpu.tdp ? " (" + ((v * gpu.tdp) / 100).toFixed(0) + " W)" : ""),
      temp: fixed(0, " °C"),
      clock: fixed(0, " %"),
    };
    const series = [{ label: "time", value: (u, v) => when(v) + (ledgerAt(gpu, v) ? ", " + ledgerAt(gpu, v) : "") }];
    gpu.series.forEach(([key]) => {
      const meta = data.series[key];
      series.push({
        label: meta.label,
        stroke: meta.colour,
        width: key === "util" ? 1.25 : 1,
        dash: key === "limit" ? [6, 4] : undefined,
        value: formats[key],
        spanGaps: false,
        points: { show: false },
      });
    });
    const band = document.createElement("canvas");
    band.className = "ledger-band";
    band.style.height = BAND_PX + "px";
    const opts = {
      width: width,
      height: 300,
      series: series,
      scales: {
        x: { time: false },
        y: { range: (u, min, max) => [0, Math.max(105, Math.ceil((max || 0) / 10) * 10)] },
      },
      axes: [
        { values: (u, ticks) => ticks.map(tick), space: data.dated ? 110 : 50 },
        { label: "%  /  °C", size: 50 },
      ],
      legend: { live: true },
      hooks: {
        drawClear: [(u) => drawEpisodes(u, gpu)],
        draw: [(u) => drawLedger(u, gpu, band)],
      },
    };
    const values = [gpu.x].concat(gpu.series.map(([, v]) => v));
    const u = new uPlot(opts, values, section);
    u.root.querySelector(".u-wrap").after(band);
    drawLedger(u, gpu, band);
    return u;
  }

  const width = Math.max(600, Math.min(1600, holder.clientWidth || document.body.clientWidth - 40));
  let rendered = 0;
  data.gpus.forEach((gpu) => {
    if (chart(gpu, width)) rendered += 1;
  });
  document.body.dataset.rendered = String(rendered);
})();
