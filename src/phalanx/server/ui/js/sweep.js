// Sweep analysis of a group's trials: parallel coordinates of the params and the metric (drag along
// an axis to brush: only the trials inside every brush stay lit, and the trials table keeps only
// them; double-click an axis to clear its brush), a scatter of one param against the metric, and
// each param's importance. Plain SVG: a dozen to a few hundred trials, no library needed for that.

import { h } from "./util.js";

const NS = "http://www.w3.org/2000/svg";
const fmt = (v) => (v === null || v === undefined ? "—" : typeof v === "number" ? String(Number(v.toPrecision(4))) : String(v));

function svgEl(parent, tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  parent.appendChild(e);
  return e;
}

// An axis' scale over the trials' values: numbers linear, or logarithmic when all are positive and
// span two decades or more (a log-sampled lr); anything else categorical, in sorted order.
// f(v) -> 0..1 (bottom to top).
export function axisScale(values) {
  const present = values.filter((v) => v !== null && v !== undefined);
  if (present.length && present.every((v) => typeof v === "number")) {
    const lo = Math.min(...present), hi = Math.max(...present);
    const log = lo > 0 && hi / lo >= 100;
    const t = log ? Math.log10 : (v) => v;
    const a = t(lo), b = t(hi);
    return { kind: log ? "log" : "linear", f: (v) => (b === a ? 0.5 : (t(v) - a) / (b - a)), lo: fmt(lo), hi: fmt(hi) };
  }
  const cats = [...new Set(present.map(String))].sort();
  return { kind: "categorical", cats, f: (v) => (cats.length === 1 ? 0.5 : cats.indexOf(String(v)) / (cats.length - 1)),
    lo: cats[0] ?? "", hi: cats[cats.length - 1] ?? "" };
}

// A param's importance: the share of the metric's variance that the param explains alone (the
// correlation ratio, η²: a first-order, fANOVA-like measure). Categorical params group by value;
// numeric ones by ⌊√n⌋ bins of equal count along their sorted values.
export function importance(trials, name) {
  const pts = trials.filter((t) => t.params[name] !== undefined && t.params[name] !== null).map((t) => [t.params[name], t.value]);
  if (pts.length < 2) return 0;
  const mean = pts.reduce((a, [, y]) => a + y, 0) / pts.length;
  const total = pts.reduce((a, [, y]) => a + (y - mean) ** 2, 0);
  if (!total) return 0;
  const groups = new Map();
  if (pts.every(([x]) => typeof x === "number")) {
    const bins = Math.max(1, Math.floor(Math.sqrt(pts.length)));
    [...pts].sort((p, q) => p[0] - q[0]).forEach(([, y], i) => {
      const b = Math.floor((i * bins) / pts.length);
      if (!groups.has(b)) groups.set(b, []);
      groups.get(b).push(y);
    });
  } else {
    for (const [x, y] of pts) {
      const k = String(x);
      if (!groups.has(k)) groups.set(k, []);
      groups.get(k).push(y);
    }
  }
  let between = 0;
  for (const ys of groups.values()) {
    const m = ys.reduce((a, y) => a + y, 0) / ys.length;
    between += ys.length * (m - mean) ** 2;
  }
  return between / total;
}

// Blue (lowest metric) to orange (highest).
const metricColour = (u) => `hsl(${Math.round(220 - 190 * u)}, 70%, 45%)`;

// brushes: {axis: [lo, hi]} in 0..1, kept by the caller across redraws; onFilter(set of trial
// numbers inside every brush, or null without brushes) runs after each change; onDrag(true/false)
// when a drag along an axis starts and ends (a page that redraws itself waits for the end).
export function sweepAnalysis(trials, names, metric, bestNo, { brushes, onFilter, onDrag = () => {} }) {
  const scored = trials.filter((t) => t.value !== null && t.value !== undefined);
  if (!scored.length) return h("p", { class: "muted" }, "No trial has reported the metric yet.");
  const axes = [...names, "value"];
  const get = (t, a) => (a === "value" ? t.value : t.params[a]);
  const scales = axes.map((a) => axisScale(scored.map((t) => get(t, a))));
  const metricScale = scales[scales.length - 1];
  const W = Math.max(420, 140 * axes.length), H = 280, top = 26, bottom = 34, left = 40, right = 40;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("id", "parallel");
  svg.setAttribute("width", "100%");
  svg.setAttribute("style", `max-width: ${W}px; user-select: none`);
  const x = (i) => left + (i * (W - left - right)) / Math.max(1, axes.length - 1);
  const y = (u) => H - bottom - u * (H - top - bottom);
  const uOf = (svgY) => Math.max(0, Math.min(1, (H - bottom - svgY) / (H - top - bottom)));
  const lines = new Map();
  for (const t of scored) {
    const pts = axes.map((a, i) => `${x(i)},${y(scales[i].f(get(t, a)))}`).join(" ");
    const best = t.number === bestNo;
    lines.set(t.number, svgEl(svg, "polyline", {
      points: pts, fill: "none", stroke: metricColour(metricScale.f(t.value)), "stroke-width": best ? 3 : 1.4,
      "stroke-dasharray": t.state === "pruned" ? "4 3" : "none", "data-trial": t.number,
    }));
  }
  const brushRects = new Map();
  const inside = () => {
    const keep = new Set();
    for (const t of scored) {
      const ok = axes.every((a, i) => {
        const b = brushes[a];
        if (!b) return true;
        const u = scales[i].f(get(t, a));
        return u >= b[0] - 1e-9 && u <= b[1] + 1e-9;
      });
      if (ok) keep.add(t.number);
    }
    return keep;
  };
  const apply = () => {
    const keep = inside();
    for (const [n, line] of lines) line.classList.toggle("filtered", !keep.has(n));
    for (const a of axes) {
      const r = brushRects.get(a);
      const b = brushes[a];
      r.setAttribute("visibility", b ? "visible" : "hidden");
      if (b) { r.setAttribute("y", y(b[1])); r.setAttribute("height", Math.max(1, y(b[0]) - y(b[1]))); }
    }
    onFilter(Object.keys(brushes).length ? keep : null);
  };
  // screen -> SVG units, with the mapping taken when the drag starts
  const toSvgY = (ev, m) => (ev.clientY - m.f) / m.d;
  axes.forEach((a, i) => {
    const s = scales[i];
    svgEl(svg, "line", { x1: x(i), x2: x(i), y1: top, y2: H - bottom, stroke: "#888", "data-axis": a });
    svgEl(svg, "text", { x: x(i), y: H - 10, "text-anchor": "middle", "font-size": 12 },
      (a === "value" ? metric : a) + (s.kind === "log" ? " (log)" : ""));
    svgEl(svg, "text", { x: x(i) + 5, y: top - 8, "font-size": 10, fill: "#666" }, s.hi);
    svgEl(svg, "text", { x: x(i) + 5, y: H - bottom + 12, "font-size": 10, fill: "#666" }, s.lo);
    brushRects.set(a, svgEl(svg, "rect", { x: x(i) - 7, width: 14, y: top, height: 0, class: "brush", visibility: "hidden" }));
    // the axis' grip: a band 24 units wide to drag along (a little past its ends, to reach them)
    const grip = svgEl(svg, "rect", { x: x(i) - 12, y: top - 12, width: 24, height: H - top - bottom + 24, fill: "transparent",
      class: "brush-target", "data-axis": a, style: "cursor: ns-resize" });
    grip.addEventListener("mousedown", (ev) => {
      ev.preventDefault();
      const ctm = svg.getScreenCTM();
      if (!ctm) return;
      onDrag(true);
      const start = uOf(toSvgY(ev, ctm));
      const move = (e) => {
        const now = uOf(toSvgY(e, ctm));
        brushes[a] = [Math.min(start, now), Math.max(start, now)];
        apply();
      };
      const up = (e) => {
        window.removeEventListener("mousemove", move);
        window.removeEventListener("mouseup", up);
        const now = uOf(toSvgY(e, ctm));
        if (Math.abs(now - start) < 0.01) delete brushes[a]; // a click, not a drag: no brush
        else brushes[a] = [Math.min(start, now), Math.max(start, now)];
        apply();
        onDrag(false);
      };
      window.addEventListener("mousemove", move);
      window.addEventListener("mouseup", up);
    });
    grip.addEventListener("dblclick", () => { delete brushes[a]; apply(); });
  });
  apply();

  const legend = h("p", { class: "muted small" }, `Colour: ${metric} from `, h("span", { style: { color: metricColour(0) } }, `${metricScale.lo} (blue)`),
    " to ", h("span", { style: { color: metricColour(1) } }, `${metricScale.hi} (orange)`),
    ". Drag along an axis to keep only the trials in that range (the table follows); double-click it to clear.");
  return h("div", { id: "sweep" },
    h("div", { class: "chart" }, svg), legend,
    names.length ? h("div", { class: "sweep-panels" }, scatterPanel(scored, names, metric), importancePanel(scored, names, metric)) : null);
}

function scatterPanel(scored, names, metric) {
  const box = h("div", { class: "card", id: "scatter-box" });
  const pick = h("select", { "aria-label": "scatter param", onchange: () => draw() }, names.map((n) => h("option", { value: n }, n)));
  function draw() {
    const name = pick.value;
    const W = 420, H = 260, m = 36;
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("id", "scatter");
    svg.setAttribute("width", "100%");
    svg.setAttribute("style", `max-width: ${W}px`);
    const sx = axisScale(scored.map((t) => t.params[name]));
    const sy = axisScale(scored.map((t) => t.value));
    svgEl(svg, "line", { x1: m, x2: W - 10, y1: H - m, y2: H - m, stroke: "#888" });
    svgEl(svg, "line", { x1: m, x2: m, y1: 10, y2: H - m, stroke: "#888" });
    svgEl(svg, "text", { x: (W + m) / 2, y: H - 6, "text-anchor": "middle", "font-size": 12 }, name + (sx.kind === "log" ? " (log)" : ""));
    svgEl(svg, "text", { x: m, y: H - m + 14, "font-size": 10, fill: "#666" }, sx.lo);
    svgEl(svg, "text", { x: W - 10, y: H - m + 14, "font-size": 10, fill: "#666", "text-anchor": "end" }, sx.hi);
    svgEl(svg, "text", { x: 4, y: 16, "font-size": 10, fill: "#666" }, `${metric} ${sy.hi}`);
    svgEl(svg, "text", { x: 4, y: H - m - 4, "font-size": 10, fill: "#666" }, sy.lo);
    for (const t of scored) {
      if (t.params[name] === undefined || t.params[name] === null) continue;
      const cx = m + 8 + sx.f(t.params[name]) * (W - m - 26);
      const cy = H - m - 8 - sy.f(t.value) * (H - m - 26);
      const dot = svgEl(svg, "circle", { cx, cy, r: 5, fill: metricColour(sy.f(t.value)), "data-trial": t.number });
      svgEl(dot, "title", {}, `trial ${t.number}: ${name}=${fmt(t.params[name])}, ${metric} ${fmt(t.value)}`);
    }
    box.replaceChildren(h("h3", {}, `${metric} against `, pick), svg);
  }
  draw();
  return box;
}

function importancePanel(scored, names, metric) {
  const ranked = names.map((n) => [n, importance(scored, n)]).sort((a, b) => b[1] - a[1]);
  return h("div", { class: "card", id: "importance" },
    h("h3", {}, "Param importance"),
    h("p", { class: "muted small" }, `The share of ${metric}'s variance each param explains alone (η², first order), over ${scored.length} trials.`),
    h("table", { class: "grid" }, h("tbody", {}, ranked.map(([n, v]) => h("tr", { "data-param": n, "data-importance": String(v) },
      h("td", { class: "mono" }, n),
      h("td", { style: { width: "55%" } }, h("div", { class: "bar", style: { width: `${Math.round(v * 100)}%` } })),
      h("td", { class: "num" }, v.toFixed(2)))))));
}
