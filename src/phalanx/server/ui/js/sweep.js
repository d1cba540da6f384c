// Sweep analysis of a group's trials: parallel coordinates of the params and the metric (drag along
// an axis to brush: only the trials inside every brush stay lit, and the trials table keeps only
// them; double-click an axis to clear its brush), a scatter of one param against the metric, and
// each param's importance, and the best metric so far against time. The same view serves a group's
// trials and any set of runs (sweeps.js: a filtered run table or a selection), whose importance the
// server computes and caches (server/importance.py).
// Plain SVG rather than plotly.js (3.5 MB, what ClearML vendors): the chart needs one line per run,
// log and categorical axes, brushing and hover, which is ~200 lines here, keeps the page light at
// 2,000 runs and is tested in the browser (tests/e2e/test_group_ui.py, test_table.py).

import { plural, h } from "./util.js";

const NS = "http://www.w3.org/2000/svg";
const fmt = (v) => (v === null || v === undefined ? "—" : typeof v === "number" ? String(Number(v.toPrecision(4))) : String(v));

function svgEl(parent, tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  parent.appendChild(e);
  return e;
}

// An axis' scale over the trials' values. Numbers: `wanted` ("log" or "linear": the group's sampling
// distribution, or the user's choice) decides; without it, logarithmic when all are positive and
// span two decades or more (a log-spaced list of values), else linear; a log axis needs positive
// values. Anything else categorical, in sorted order. f(v) -> 0..1 (bottom to top).
export function axisScale(values, wanted) {
  const present = values.filter((v) => v !== null && v !== undefined);
  if (present.length && present.every((v) => typeof v === "number")) {
    const lo = Math.min(...present), hi = Math.max(...present);
    const log = lo > 0 && (wanted === "log" || (!wanted && hi / lo >= 100));
    const t = log ? Math.log10 : (v) => v;
    const a = t(lo), b = t(hi);
    return { kind: log ? "log" : "linear", canLog: lo > 0, f: (v) => (b === a ? 0.5 : (t(v) - a) / (b - a)), lo: fmt(lo), hi: fmt(hi) };
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
// label(t): what hover names a line by (default "trial N"); importance: {param: η²} from the server
// (null while it computes) instead of computing it here; goal "min"/"max" and when(t) (its x: a
// time, or the trial number) for the best-so-far chart. axes: {param: "log"|"linear"}, each axis'
// kind (the group's sampling distributions, then the user's clicks on an axis name, kept by the
// caller, which redraws on onAxis(name, kind)).
export function sweepAnalysis(trials, names, metric, bestNo, { brushes, onFilter, onDrag = () => {},
  label = (t) => `trial ${t.number}`, importance: given, goal = "min", when = (t) => t.number, whenLabel = "trial",
  axes: axisKinds = {}, onAxis = null }) {
  const scored = trials.filter((t) => t.value !== null && t.value !== undefined);
  if (!scored.length) return h("p", { class: "muted" }, "No trial has reported the metric yet.");
  const axes = [...names, "value"];
  const get = (t, a) => (a === "value" ? t.value : t.params[a]);
  const scales = axes.map((a) => axisScale(scored.map((t) => get(t, a)), axisKinds[a]));
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
  const hover = h("p", { class: "mono small", id: "sweep-hover" }, "\u00a0");
  for (const t of scored) {
    const pts = axes.map((a, i) => `${x(i)},${y(scales[i].f(get(t, a)))}`).join(" ");
    const best = t.number === bestNo;
    const line = svgEl(svg, "polyline", {
      points: pts, fill: "none", stroke: metricColour(metricScale.f(t.value)), "stroke-width": best ? 3 : 1.4,
      "stroke-dasharray": t.state === "pruned" ? "4 3" : "none", "data-trial": t.number,
    });
    const text = `${label(t)}: ` + [...names.map((n) => `${n}=${fmt(t.params[n])}`), `${metric} ${fmt(t.value)}`].join(", ");
    svgEl(line, "title", {}, text);
    line.addEventListener("mouseenter", () => { hover.textContent = text; line.classList.add("hovered"); });
    line.addEventListener("mouseleave", () => { hover.textContent = "\u00a0"; line.classList.remove("hovered"); });
    lines.set(t.number, line);
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
    const name = svgEl(svg, "text", { x: x(i), y: H - 10, "text-anchor": "middle", "font-size": 12, "data-axis-name": a,
      "data-kind": s.kind }, (a === "value" ? metric : a) + (s.kind === "log" ? " (log)" : ""));
    if (onAxis && s.canLog) {  // a numeric axis of positive values: click to switch log / linear
      name.setAttribute("style", "cursor: pointer; text-decoration: underline dotted");
      svgEl(name, "title", {}, `click for a ${s.kind === "log" ? "linear" : "log"} axis`);
      name.addEventListener("click", () => onAxis(a, s.kind === "log" ? "linear" : "log"));
    }
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
    h("div", { class: "chart" }, svg), hover, legend,
    h("div", { class: "sweep-panels" },
      names.length ? scatterPanel(scored, names, metric, axisKinds) : null,
      names.length ? importancePanel(scored, names, metric, given) : null,
      bestSoFarPanel(scored, metric, goal, when, whenLabel, label)));
}

function scatterPanel(scored, names, metric, axisKinds) {
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
    const sx = axisScale(scored.map((t) => t.params[name]), axisKinds[name]);
    const sy = axisScale(scored.map((t) => t.value), axisKinds.value);
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

function importancePanel(scored, names, metric, given) {
  if (given === null) {
    return h("div", { class: "card", id: "importance", "data-ready": "false" }, h("h3", {}, "Param importance"),
      h("p", { class: "muted small" }, "Computing on the server…"));
  }
  const of = (n) => (given ? given[n] ?? 0 : importance(scored, n));
  const ranked = names.map((n) => [n, of(n)]).sort((a, b) => b[1] - a[1]);
  return h("div", { class: "card", id: "importance", "data-ready": "true" },
    h("h3", {}, "Param importance"),
    h("p", { class: "muted small" }, `The share of ${metric}'s variance each param explains alone (η², first order), over ${plural(scored.length, "trial")}.`),
    h("table", { class: "grid" }, h("tbody", {}, ranked.map(([n, v]) => h("tr", { "data-param": n, "data-importance": String(v) },
      h("td", { class: "mono" }, n),
      h("td", { style: { width: "55%" } }, h("div", { class: "bar", style: { width: `${Math.round(v * 100)}%` } })),
      h("td", { class: "num" }, v.toFixed(2)))))));
}

// The best metric reached so far against when each run finished (or the trial number): how fast the
// search converged. Each run is a dot; the step line is the running best (lowest for goal "min").
export function bestSoFar(scored, goal, when) {
  const pts = scored.map((t) => [when(t), t.value, t]).filter(([x]) => x !== null && x !== undefined).sort((a, b) => a[0] - b[0]);
  let best = null;
  return pts.map(([x, v, t]) => {
    if (best === null || (goal === "max" ? v > best : v < best)) best = v;
    return { x, value: v, best, t };
  });
}

function bestSoFarPanel(scored, metric, goal, when, whenLabel, label) {
  const pts = bestSoFar(scored, goal, when);
  const box = h("div", { class: "card", id: "best-so-far", "data-best": pts.length ? String(pts[pts.length - 1].best) : "" },
    h("h3", {}, `Best ${metric} so far (${goal === "max" ? "highest" : "lowest"})`));
  if (!pts.length) return box;
  const W = 420, H = 260, m = 36;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", "100%");
  svg.setAttribute("style", `max-width: ${W}px`);
  const isTime = whenLabel === "time";
  const lo = pts[0].x, hi = pts[pts.length - 1].x;
  const fx = (x) => m + 8 + (hi === lo ? 0.5 : (x - lo) / (hi - lo)) * (W - m - 26);
  const sy = axisScale(pts.map((p) => p.value));
  const fy = (v) => H - m - 8 - sy.f(v) * (H - m - 26);
  svgEl(svg, "line", { x1: m, x2: W - 10, y1: H - m, y2: H - m, stroke: "#888" });
  svgEl(svg, "line", { x1: m, x2: m, y1: 10, y2: H - m, stroke: "#888" });
  const tick = (x) => (isTime ? new Date(x * 1000).toLocaleString() : String(x));
  svgEl(svg, "text", { x: m, y: H - m + 14, "font-size": 10, class: "axis-label" }, tick(lo));
  svgEl(svg, "text", { x: W - 10, y: H - m + 14, "font-size": 10, class: "axis-label", "text-anchor": "end" }, tick(hi));
  svgEl(svg, "text", { x: (W + m) / 2, y: H - 6, "text-anchor": "middle", "font-size": 12, class: "axis-title" }, isTime ? "finished" : whenLabel);
  svgEl(svg, "text", { x: 4, y: 16, "font-size": 10, class: "axis-label" }, `${metric} ${sy.hi}`);
  svgEl(svg, "text", { x: 4, y: H - m - 4, "font-size": 10, class: "axis-label" }, sy.lo);
  let path = "";
  pts.forEach((p, i) => {
    const x = fx(p.x), y = fy(p.best);
    path += i === 0 ? `M${x},${y}` : ` H${x} V${y}`;
  });
  svgEl(svg, "path", { d: path, fill: "none", stroke: "#1f77b4", "stroke-width": 2, id: "best-line" });
  for (const p of pts) {
    const dot = svgEl(svg, "circle", { cx: fx(p.x), cy: fy(p.value), r: 3.5, fill: "#999", "data-trial": p.t.number });
    svgEl(dot, "title", {}, `${label(p.t)}: ${metric} ${fmt(p.value)} (best so far ${fmt(p.best)})`);
  }
  box.appendChild(svg);
  return box;
}
