// Odradek console: the throughput chart (an SVG drawn from /api/throughput). No libraries.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function niceMax(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function fmt(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return v >= 10 ? v.toFixed(0) : v.toFixed(1);
  }

  function clock(ms) {
    const d = new Date(ms);
    return d.toISOString().substring(11, 19);
  }

  function draw(box, data) {
    const series = data.series || [];
    const W = 1200, H = 260, L = 56, R = 12, T = 12, B = 28;
    const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "messages in per second" });
    const now = Date.now();
    // the axis spans the samples there are (at least a minute), up to the whole window
    const oldest = series.length ? series[0].t : now;
    const span = Math.min(Math.max(now - oldest, 60000), data.window_s * 1000);
    const t0 = now - span;
    const max = niceMax(Math.max(0, ...series.map((p) => p.messages_per_s)));
    const x = (t) => L + ((t - t0) / (now - t0)) * (W - L - R);
    const y = (v) => T + (1 - v / max) * (H - T - B);
    for (let i = 0; i <= 5; i++) {
      const v = (max * i) / 5;
      svg.appendChild(el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e4e7ec" }));
      svg.appendChild(el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#667085" }, fmt(v)));
    }
    for (let i = 0; i <= 4; i++) {
      const ago = (span * (4 - i)) / 4;
      const label = ago === 0 ? "now" : ago >= 120000 ? `-${Math.round(ago / 60000)} min` : `-${Math.round(ago / 1000)} s`;
      svg.appendChild(el("text", { x: x(now - ago), y: H - 8, "text-anchor": "middle", "font-size": 11, fill: "#667085" }, label));
    }
    const pts = series.filter((p) => p.t >= t0).map((p) => `${x(p.t).toFixed(1)},${y(p.messages_per_s).toFixed(1)}`);
    if (pts.length > 1) {
      const first = pts[0].split(",")[0], last = pts[pts.length - 1].split(",")[0];
      svg.appendChild(el("polygon", {
        points: `${first},${y(0)} ${pts.join(" ")} ${last},${y(0)}`, fill: "#2b4c7e", "fill-opacity": 0.12,
      }));
    }
    if (pts.length > 0) {
      svg.appendChild(el("polyline", { points: pts.join(" "), fill: "none", stroke: "#2b4c7e", "stroke-width": 2 }));
    }
    svg.appendChild(el("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#98a2b3" }));
    svg.appendChild(el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#98a2b3" }));
    box.replaceChildren(svg);
    const label = document.getElementById("chart-now");
    if (label) {
      const lastPoint = series[series.length - 1];
      label.textContent = lastPoint
        ? `${fmt(lastPoint.messages_per_s)} messages/s at ${clock(lastPoint.t)} UTC · ${series.length} samples`
        : data.error ? `no samples: ${data.error}` : "waiting for the second sample…";
    }
    box.dataset.points = String(series.length);
    box.dataset.max = String(Math.max(0, ...series.map((p) => p.messages_per_s)));
  }

  function start(box) {
    let timer = null;
    const refresh = () => {
      fetch(box.dataset.src, { headers: { Accept: "application/json" } })
        .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`HTTP ${r.status}`))))
        .then((data) => {
          draw(box, data);
          clearTimeout(timer);
          timer = setTimeout(refresh, Math.max(1000, Math.min(data.interval_s * 1000, 10000)));
        })
        .catch(() => {
          clearTimeout(timer);
          timer = setTimeout(refresh, 10000);
        });
    };
    refresh();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const box = document.getElementById("chart");
    if (box) start(box);
  });
})();
