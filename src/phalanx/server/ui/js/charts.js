// Scalar charts drawn by uPlot (vendored; made for large time series). One chart per title, one line
// per series. The server already downsampled each series (min/max per bucket keeps peaks); here we
// only align series on a shared x axis, smooth (EMA, as TensorBoard does) and draw.

import { color, plural, fmtTime, h, add } from "./util.js";

export const MAX_POINTS = 2000;
export const MAX_LEGEND = 30; // series a chart's legend lists

// How often a live experiment's charts take in new points (localStorage "phalanx.refreshMs" overrides).
export function liveMs() {
  const v = Number(globalThis.localStorage?.getItem("phalanx.refreshMs"));
  return Number.isFinite(v) && v >= 200 ? v : 5000;
}

export function smooth(values, weight) {
  if (!weight) return values;
  const out = new Array(values.length);
  let last = 0;
  let n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || !Number.isFinite(v)) { out[i] = null; continue; }
    last = last * weight + (1 - weight) * v;
    n++;
    out[i] = last / (1 - Math.pow(weight, n)); // debiased, so the first points are not pulled to 0
  }
  return out;
}

// lines: [{label, xs, ys}] -> uPlot data [xUnion, ys1, ys2, ...]. Where a line has no point at an x
// another line has, its cell is undefined, which uPlot draws across; a null (a line's own gap: see
// breakGaps, a NaN, a value a log axis cannot show) is a break in the line.
export function align(lines) {
  const xset = new Set();
  for (const l of lines) for (const x of l.xs) xset.add(x);
  const xs = Float64Array.from(xset).sort();
  const index = new Map();
  xs.forEach((x, i) => index.set(x, i));
  const data = [Array.from(xs)];
  for (const l of lines) {
    const col = new Array(xs.length).fill(undefined);
    for (let i = 0; i < l.xs.length; i++) col[index.get(l.xs[i])] = l.ys[i];
    data.push(col);
  }
  return data;
}

// A line's own gap is not bridged: where its next point comes more than GAP_FACTOR times its median
// spacing later (a stop and a resume hours after, a rank that paused), a null point between the two
// breaks the line, on any x axis. Lines of fewer than 8 points are drawn as they are.
export const GAP_FACTOR = 20;
export function breakGaps(line) {
  const { xs, ys } = line;
  if (xs.length < 8) return line;
  const steps = [];
  for (let i = 1; i < xs.length; i++) steps.push(xs[i] - xs[i - 1]);
  const median = [...steps].sort((a, b) => a - b)[Math.floor(steps.length / 2)];
  if (!(median > 0) || !steps.some((d) => d > GAP_FACTOR * median)) return line;
  const bx = [], by = [];
  for (let i = 0; i < xs.length; i++) {
    if (i && xs[i] - xs[i - 1] > GAP_FACTOR * median) { bx.push((xs[i] + xs[i - 1]) / 2); by.push(null); }
    bx.push(xs[i]); by.push(ys[i]);
  }
  return { ...line, xs: bx, ys: by };
}

// Tick labels with the digits the ticks need to differ, never "0" for a small value: exponents
// when the largest tick is below 1e-3 or from 1e6 up (1e-5, 1.5e-5, 2e-5), else fixed decimals
// (0.25, 0.5). uPlot's default kept 3 decimals: a 1e-5 learning rate's ticks all read "0".
export function tickLabels(splits) {
  const xs = splits.filter((v) => v !== null && v !== undefined && Number.isFinite(v));
  if (!xs.length) return splits.map(() => "");
  const big = Math.max(...xs.map(Math.abs));
  let step = Infinity;
  for (let i = 1; i < xs.length; i++) { const d = Math.abs(xs[i] - xs[i - 1]); if (d > 0 && d < step) step = d; }
  if (!Number.isFinite(step)) step = big || 1;
  const [stepDigits, stepExp] = mantissa(step);
  const exponential = big !== 0 && (big < 1e-3 || big >= 1e6);
  return splits.map((v) => {
    if (v === null || v === undefined || !Number.isFinite(v)) return "";
    if (v === 0) return "0";
    if (exponential) {
      const digits = Math.max(0, Math.min(15, mantissa(v)[1] - stepExp + stepDigits));
      return v.toExponential(digits).replace(/\.?0+e/, "e").replace("e+", "e");
    }
    return v.toFixed(Math.max(0, Math.min(20, stepDigits - stepExp)));
  });
}

// (digits after the point of its mantissa, its exponent): 0.25 -> [1, -1], 5e-6 -> [0, -6]
function mantissa(v) {
  const [m, e] = Number(Math.abs(v).toPrecision(12)).toExponential().split("e");
  return [(m.split(".")[1] || "").length, Number(e)];
}

// A line's value at each x of `xs` (sorted): its own point there, else linearly interpolated between
// its neighbours, null outside its range or where its value is missing (NaN was sent as null).
function valuesAt(line, xs) {
  const pts = [];
  for (let i = 0; i < line.xs.length; i++) if (line.ys[i] !== null && line.ys[i] !== undefined) pts.push([line.xs[i], line.ys[i]]);
  pts.sort((a, b) => a[0] - b[0]);
  const out = new Array(xs.length).fill(null);
  let j = 0;
  for (let i = 0; i < xs.length; i++) {
    const x = xs[i];
    while (j < pts.length && pts[j][0] < x) j++;
    if (j < pts.length && pts[j][0] === x) out[i] = pts[j][1];
    else if (j > 0 && j < pts.length) {
      const [x0, y0] = pts[j - 1];
      const [x1, y1] = pts[j];
      out[i] = y0 + ((y1 - y0) * (x - x0)) / (x1 - x0);
    }
  }
  return out;
}

// Lines that share a `group` (the ranks of one run; the runs sharing a param's value) become three:
// their mean, and their min and max, which the chart fills between (a band). At each x of the
// group's lines, every line that spans that x counts (interpolated between its own points where it
// has none: downsampled ranks keep different steps). A group of one line stays as it is.
export function aggregateLines(lines) {
  const groups = new Map();
  for (const l of lines) {
    const key = l.group ?? "";
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(l);
  }
  const out = [];
  for (const [key, members] of groups) {
    if (members.length < 2) { out.push(...members); continue; }
    const xs = Array.from(new Set(members.flatMap((l) => l.xs))).sort((a, b) => a - b);
    const cols = members.map((l) => valuesAt(l, xs));
    const mean = new Array(xs.length).fill(null);
    const lo = new Array(xs.length).fill(null);
    const hi = new Array(xs.length).fill(null);
    for (let i = 0; i < xs.length; i++) {
      let sum = 0;
      let n = 0;
      for (const c of cols) {
        const v = c[i];
        if (v === null) continue;
        sum += v; n++;
        if (lo[i] === null || v < lo[i]) lo[i] = v;
        if (hi[i] === null || v > hi[i]) hi[i] = v;
      }
      if (n) mean[i] = sum / n;
    }
    const name = members[0].groupLabel ?? key;
    const count = members.reduce((a, l) => a + (l.count || l.xs.length), 0);
    const color = members[0].groupColor ?? members[0].color;
    const base = { xs, count, color, group: key };
    out.push({ ...base, label: `${name} · mean of ${members.length}`, ys: mean, band: "mean" });
    out.push({ ...base, label: `${name} · max`, ys: hi, band: "max" });
    out.push({ ...base, label: `${name} · min`, ys: lo, band: "min" });
  }
  return out;
}

// A CSS colour at low opacity (a band's fill).
export function translucent(c, alpha = 0.18) {
  if (c.startsWith("hsl(")) return c.replace("hsl(", "hsla(").replace(/\)$/, `, ${alpha})`);
  if (/^#[0-9a-f]{6}$/i.test(c)) return c + Math.round(alpha * 255).toString(16).padStart(2, "0");
  return c;
}

// The y axis as wide as its longest tick label (a fixed 60 px clipped values from 100,000 up).
function axisWidth(u, values, axisIdx, cycleNum) {
  const axis = u.axes[axisIdx];
  if (cycleNum > 1) return axis._size;
  let width = axis.ticks.size + axis.gap;
  const longest = (values || []).reduce((a, v) => (String(v).length > a.length ? String(v) : a), "");
  if (longest) {
    u.ctx.font = axis.font[0];
    width += u.ctx.measureText(longest).width / devicePixelRatio;
  }
  return Math.max(40, Math.ceil(width) + 4);
}

function fmtY(v) { return v === null || v === undefined ? "—" : Number(v).toPrecision(5); }

function lastValue(ys) {
  for (let i = (ys || []).length - 1; i >= 0; i--) if (ys[i] !== null && ys[i] !== undefined) return ys[i];
  return null;
}

// A chart card: title, note, uPlot canvas. update() redraws with new lines or options.
// detail(min, max), if given, returns (a promise of) the same lines restricted to an x range: after a
// drag-zoom the chart asks for it, so zooming into a downsampled series shows its real points.
// Double-click goes back to the whole series.
// The page theme's colours for uPlot's axes (style.css: light, or dark when the system asks for it),
// read when a chart is built; a change of the system setting rebuilds every chart on the page.
function themed() {
  const css = getComputedStyle(document.documentElement);
  const v = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return { text: v("--muted", "#667085"), grid: v("--grid", "#eef0f3") };
}
const LIVE_CHARTS = new Set();
window.matchMedia?.("(prefers-color-scheme: dark)").addEventListener?.("change", () => {
  for (const c of LIVE_CHARTS) c.rebuild();
});

export class ScalarChart {
  constructor(parent, title, detail = null) {
    this.title = title;
    this.detail = detail;
    this.request = 0;
    this.full = null;
    this.plot = null;
    this.body = h("div", { class: "chart-body" });
    this.note = h("div", { class: "note" });
    const csv = h("button", { class: "link small chart-csv", title: "the points drawn, as CSV", onclick: () => this.exportCsv() }, "CSV");
    // this chart's own y scale, log or linear, whatever the toolbar's log scale says for the others
    this.logOverride = null;
    this.logButton = h("button", { class: "link small chart-log", title: "this chart: log or linear y axis",
      onclick: () => { this.logOverride = !this.logShown(); this.rebuild(); } }, "log y");
    this.card = h("div", { class: "chart-card", "data-title": title }, h("h3", {}, title, " ", csv, " ", this.logButton), this.body, this.note);
    add(parent, this.card);
    this.resizer = new ResizeObserver(() => {
      if (this.plot) this.plot.setSize({ width: this.width(), height: 300 });
    });
    this.resizer.observe(this.card);
    LIVE_CHARTS.add(this);
  }

  // Built again from the last lines (the theme changed): not an in-place refresh.
  rebuild() {
    if (!this.last) return;
    this.opts = null;
    this.update(...this.last);
  }

  width() { return Math.max(300, this.card.clientWidth - 24); }

  // the options as this chart draws them: its own log choice over the toolbar's
  own(opts) { return this.logOverride === null ? opts : { ...opts, log: this.logOverride }; }

  logShown() { return !!(this.opts && this.opts.log); }

  // lines: [{label, xs, ys, count, downsampled, color?, group?}]; opts: {xMode, log, smoothing,
  // aggregate} (aggregate: lines of a group drawn as their mean and a min–max band)
  prepare(lines, opts) {
    const { log = false, smoothing = 0, aggregate = false } = opts || {};
    return (aggregate ? aggregateLines(lines) : lines).map((l) => {
      let ys = smooth(l.ys, smoothing);
      if (log) ys = ys.map((v) => (v !== null && v > 0 ? v : null));
      return breakGaps({ ...l, ys });
    });
  }

  // New points of a live experiment (same series, same x axis and scale kind): swap the data into
  // the plot in place. The user's zoom, hidden series and smoothing stay; a zoomed view refetches
  // its window so new points inside it show up.
  refresh(lines, given) {
    const opts = this.own(given);
    const labels = lines.map((l) => l.label).join("\u0000");
    // this.opts is a copy: the views pass their one shared, mutated state object, so comparing
    // against it would always find "the same" and never rebuild for log scale or another x axis.
    const same = this.plot && labels === this.labels && this.opts && opts &&
      this.opts.xMode === opts.xMode && this.opts.log === opts.log && !!this.opts.aggregate === !!opts.aggregate;
    if (!same) return false;
    this.opts = { ...opts };
    const data = align(this.prepare(lines, opts));
    this.full = data;
    this.fullNote = this.describe(lines);
    if (this.zoomedTo) {
      const [min, max] = this.zoomedTo;
      this.zoomed(min, max, true);
    } else {
      this.note.textContent = this.fullNote;
      this.plot.setData(data, true);
    }
    this.card.dataset.refreshes = String(Number(this.card.dataset.refreshes || 0) + 1);
    return true;
  }

  describe(lines) {
    const total = lines.reduce((a, l) => a + (l.count || l.xs.length), 0);
    const shown = lines.reduce((a, l) => a + l.xs.length, 0);
    return `${lines.length} series · ${plural(total, "point")}` +
      (shown < total ? ` (showing ${shown.toLocaleString()}, peaks kept)` : "") +
      " · drag to zoom, double-click to reset";
  }

  update(lines, given) {
    this.last = [lines, given];
    if (this.refresh(lines, given)) return;
    const opts = this.own(given);
    const { xMode = "step", log = false } = opts || {};
    this.opts = { ...opts };
    this.labels = lines.map((l) => l.label).join("\u0000");
    this.zoomedTo = null;
    this.request++;
    const prepared = this.prepare(lines, opts);
    const data = align(prepared);
    this.full = data;
    const xs0 = data[0].length ? data[0][0] : 0;
    const single = data[0].length === 1;
    const pad = xMode === "step" ? 1 : 60;
    this.note.textContent = this.describe(lines);
    this.fullNote = this.note.textContent;
    // rebuilding (other series, another axis): keep which series the user hid
    const hidden = new Set();
    if (this.plot) {
      this.plot.series.forEach((s, i) => { if (i > 0 && s.show === false) hidden.add(s.label); });
      this.plot.destroy();
      this.plot = null;
    }
    const theme = themed();
    const options = {
      width: this.width(),
      height: 300,
      // A title whose points all share one x (one report each) still gets a readable axis.
      scales: {
        x: single ? { time: xMode === "time", auto: false, range: [xs0 - pad, xs0 + pad] } : { time: xMode === "time" },
        y: { distr: log ? 3 : 1 },
      },
      series: [
        // Not hovering, the legend shows each line's last value (what one usually wants to read).
        { label: { time: "time", relative: "seconds" }[xMode] || "iteration",
          value: (u, v, sidx, idx) => (idx === null || idx === undefined ? "last"
            : xMode === "time" ? fmtTime(v) : xMode === "relative" ? Number(v).toFixed(1) : v) },
        ...prepared.map((l, i) => ({
          label: l.label,
          stroke: l.band === "min" || l.band === "max" ? translucent(l.color || color(i), 0.45) : l.color || color(i),
          width: l.band === "min" || l.band === "max" ? 0.5 : 1.5,
          spanGaps: false, // undefined (another line's x) is drawn across, null is a gap: see align
          dash: l.dash,
          show: !hidden.has(l.label),
          points: { show: l.xs.length <= 60, size: 5 },
          value: (u, v, sidx, idx) => fmtY(idx === null || idx === undefined ? lastValue(u.data[sidx]) : v),
        })),
      ],
      axes: [{ stroke: theme.text, grid: { stroke: theme.grid }, ticks: { stroke: theme.grid } },
        { stroke: theme.text, grid: { stroke: theme.grid }, ticks: { stroke: theme.grid }, size: axisWidth,
          values: (u, splits) => tickLabels(splits) }],
      // an aggregate's min–max band: filled from its max line down to its min line
      bands: bandsOf(prepared),
      cursor: { drag: { x: true, y: false }, points: { size: 6 } },
      // a legend of more than 30 lines (Compare of many runs) costs more than it tells: the run
      // cards above say which colour is which run
      legend: { show: prepared.length <= MAX_LEGEND, live: true },
      hooks: { setScale: [(u, key) => { if (key === "x") this.zoomed(u.scales.x.min, u.scales.x.max); }] },
    };
    this.plot = new uPlot(options, data, this.body);
    this.plot.over.addEventListener("dblclick", () => this.restore());
    // What is drawn, readable by the browser tests (scales, data arrays, colours).
    this.card.plot = this.plot;
    this.card.dataset.log = String(!!log);
    this.logButton.textContent = log ? "linear y" : "log y";
    this.logButton.setAttribute("aria-pressed", String(!!log));
    this.card.dataset.builds = String(Number(this.card.dataset.builds || 0) + 1);
    this.card.dataset.ready = "true";
  }

  // A drag-zoom narrower than the whole series: fetch that range in full detail.
  zoomed(min, max, again = false) {
    const xs = this.full ? this.full[0] : [];
    if (!this.detail || xs.length < 2 || min === null || max === null) return;
    if (!again && min <= xs[0] && max >= xs[xs.length - 1]) return;
    // Setting the x scale after swapping in the detail fires this hook again: nothing new to fetch.
    if (!again && this.shown && this.shown[0] === min && this.shown[1] === max) return;
    this.zoomedTo = [min, max];
    this.shown = null;
    this.card.dataset.zoom = `${min},${max}`;
    const ticket = ++this.request;
    clearTimeout(this.pending);
    this.pending = setTimeout(async () => {
      try {
        // An aggregate needs each member's neighbours just outside the view to interpolate at its
        // edges (a rank that reports every other step): fetch a margin around it.
        const pad = this.opts && this.opts.aggregate ? (max - min) * 0.1 : 0;
        this.card.dataset.fetched = `${min - pad},${max + pad}`;
        const lines = await this.detail(min - pad, max + pad);
        if (ticket !== this.request || !this.plot || !lines) return;
        // The detail replaces the coarse data, and the x scale is set again so uPlot recomputes
        // which indexes are in view: setData(…, false) alone keeps the old index window, which
        // drew a slice of the new array (a sawtooth that was not in the data).
        this.shown = [min, max];
        this.plot.batch(() => {
          this.plot.setData(align(this.prepare(lines, this.opts)), false);
          this.plot.setScale("x", { min, max });
        });
        this.card.dataset.detail = "true";
        const shown = lines.reduce((a, l) => a + l.xs.length, 0);
        this.note.textContent = `zoomed: ${plural(shown, "point")} in view · double-click to see all`;
      } catch { /* keep the downsampled view */ }
    }, 200);
  }

  // The points drawn (after smoothing; a zoomed view's detail), one column per series, as a file.
  exportCsv() {
    if (!this.plot) return;
    const quote = (v) => (/[",\n]/.test(v) ? `"${v.replace(/"/g, '""')}"` : v);
    const labels = this.plot.series.map((s, i) => (i === 0 ? { step: "step", time: "time", relative: "seconds" }[this.opts?.xMode] || "x" : s.label));
    const rows = [labels.map((l) => quote(String(l))).join(",")];
    const data = this.plot.data;
    for (let i = 0; i < data[0].length; i++) rows.push(data.map((col) => (col[i] === null || col[i] === undefined ? "" : String(col[i]))).join(","));
    const url = URL.createObjectURL(new Blob([rows.join("\n") + "\n"], { type: "text/csv" }));
    const a = h("a", { href: url, download: `${this.title.replace(/[^\w.-]+/g, "_")}.csv` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  restore() {
    this.request++;
    this.zoomedTo = null;
    this.shown = null;
    delete this.card.dataset.zoom;
    if (this.plot && this.full && this.card.dataset.detail) {
      delete this.card.dataset.detail;
      this.note.textContent = this.fullNote;
      this.plot.setData(this.full, true);
    }
  }

  destroy() {
    LIVE_CHARTS.delete(this);
    this.resizer.disconnect();
    if (this.plot) this.plot.destroy();
    this.card.remove();
  }
}

// uPlot bands ([max series, min series] indexes; 0 is the x axis) for the aggregated lines.
function bandsOf(prepared) {
  const bands = [];
  prepared.forEach((l, i) => {
    if (l.band !== "max") return;
    const j = prepared.findIndex((m) => m.band === "min" && m.group === l.group);
    if (j >= 0) bands.push({ series: [i + 1, j + 1], fill: translucent(l.color || color(i)) });
  });
  return bands;
}

// The controls every scalars view shares: smoothing, log scale, x axis.
export function chartControls(state, onChange) {
  const value = h("span", { class: "mono small" }, state.smoothing.toFixed(2));
  const slider = h("input", { type: "range", min: "0", max: "0.99", step: "0.01", value: String(state.smoothing),
    "aria-label": "smoothing",
    oninput: (ev) => { state.smoothing = Number(ev.target.value); value.textContent = state.smoothing.toFixed(2); onChange(false); } });
  const log = h("input", { type: "checkbox", id: "log-scale", onchange: (ev) => { state.log = ev.target.checked; onChange(false); } });
  log.checked = state.log;
  const xsel = h("select", { "aria-label": "x axis", onchange: (ev) => { state.xMode = ev.target.value; onChange(true); } },
    h("option", { value: "step" }, "x: iteration"), h("option", { value: "time" }, "x: wall time"),
    h("option", { value: "relative" }, "x: relative time"));
  xsel.value = state.xMode;
  return h("div", { class: "toolbar card", style: { padding: "8px 12px" } },
    h("label", {}, "Smoothing "), slider, value,
    h("span", { style: { width: "16px" } }),
    log, h("label", { for: "log-scale" }, "log scale"),
    h("span", { style: { width: "16px" } }),
    xsel);
}

// How the lines of a chart are drawn: each series, or per group the mean with a min–max band.
// choices: [[value, text]]; state.lines holds the value, state.aggregate whether it groups.
export function lineModes(state, choices, onChange) {
  const sel = h("select", { "aria-label": "lines", id: "line-mode", onchange: (ev) => {
    state.lines = ev.target.value; state.aggregate = state.lines !== "each"; onChange(); } },
  choices.map(([value, text]) => h("option", { value }, text)));
  sel.value = state.lines || "each";
  return sel;
}

// One API series -> one chart line. "relative" is seconds since t0 (the experiment's first point),
// which lines up experiments that ran at different times.
export function toLine(label, s, xMode, t0 = 0) {
  const timed = xMode !== "step" && s.times.length === s.steps.length;
  const xs = !timed ? s.steps : xMode === "relative" ? s.times.map((t) => t - t0) : s.times;
  return { label, xs, ys: s.values, count: s.count };
}

// The earliest time of any point in a title -> series map list (for relative time).
export function firstTime(metrics) {
  let t0 = Infinity;
  for (const m of metrics) for (const s of Object.values(m.series)) if (s.times.length) t0 = Math.min(t0, s.times[0]);
  return Number.isFinite(t0) ? t0 : 0;
}
