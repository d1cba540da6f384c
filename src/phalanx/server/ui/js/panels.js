// The experiment page's Scalars, Hyperparameters, Artifacts and Models tabs.

import { api } from "./api.js";
import { MAX_POINTS, ScalarChart, chartControls, firstTime, lineModes, liveMs, toLine } from "./charts.js";
import { ChartSections } from "./sections.js";
import { byReplica, clear, fmtBytes, fmtTime, fmtValue, h, add, runColor } from "./util.js";

const EMPTY = { steps: [], values: [], times: [], count: 0 };

// System metrics (phalanx.machine.sysmetrics: CPU, memory, GPU of each replica's processes) are titled
// "system/...": they get a section of their own, on a wall-time axis (their step is a sample count).
const isSystem = (title) => title.startsWith("system/");
const SYSTEM_VIEW = Object.freeze({ smoothing: 0, log: false, xMode: "time" });

export function renderScalars(panel, ctx, id) {
  const state = { smoothing: 0, log: false, xMode: "step", lines: "each", aggregate: false };
  const charts = new Map();
  const data = new Map();
  let timer = null;
  let wasLive = false;
  // training charts in collapsible sections by title prefix; system metrics in a section of their own
  const grid = h("div", { id: "charts" });
  const sections = new ChartSections(grid);
  const sysGrid = h("div", { class: "charts", id: "system-charts" });
  const sysHead = h("details", { class: "chart-section", id: "system-section", "data-section": "System", open: true, hidden: true },
    h("summary", {}, h("h2", { id: "system-head" }, "System ",
      h("span", { class: "muted small" }, "CPU, memory and GPU of each replica's processes, over wall time"))), sysGrid);
  const status = h("p", { class: "muted" }, "Loading scalars…");
  const controls = chartControls(state, (refetch) => (refetch ? load() : draw()));
  const modes = lineModes(state, [["each", "each rank"], ["ranks", "ranks: mean, min–max band"]], () => draw());
  add(controls, h("span", { style: { width: "16px" } }), modes, h("span", { style: { width: "16px" } }), sections.controls());
  // The run's colour (the same on Compare), each series (rank) a shade of it; one group, the run.
  const line = (n, i, count, s, xMode, off) => ({ ...toLine(n, s, xMode, off), color: runColor(id, i, count),
    group: id, groupLabel: "ranks", groupColor: runColor(id) });
  add(panel, controls, status, grid, sysHead);
  const viewOf = (title) => (isSystem(title) ? SYSTEM_VIEW : state);

  function draw() {
    const t0 = firstTime([...data].filter(([t]) => !isSystem(t)).map(([, m]) => m));
    let added = false;
    for (const [title, metric] of data) {
      const view = viewOf(title);
      let chart = charts.get(title);
      const names = Object.keys(metric.series).sort();
      if (!chart) {
        // Zoomed in: the same title restricted to the visible x range, downsampled again.
        const detail = async (min, max) => {
          const v = viewOf(title);
          const off = v.xMode === "relative" ? t0 : 0;
          const m = await api.metric(id, title, { max_points: MAX_POINTS, x: v.xMode === "step" ? "step" : "time",
            x_min: min + off, x_max: max + off });
          const current = Object.keys(data.get(title).series).sort();
          return current.map((n, i) => line(n, i, current.length, m.series[n] || EMPTY, v.xMode, off));
        };
        chart = new ScalarChart(isSystem(title) ? sysGrid : sections.gridFor(title), title, detail);
        charts.set(title, chart);
        added = true;
      }
      chart.update(names.map((n, i) => line(n, i, names.length, metric.series[n], view.xMode, t0)), view);
    }
    if (added) sections.filter(); // a chart that came while a search is typed follows it
  }

  async function load() {
    clearTimeout(timer);
    try {
      const { titles } = await api.titles(id);
      const names = Object.keys(titles).sort();
      const training = names.filter((t) => !isSystem(t));
      if (!names.length) {
        status.className = "empty";
        status.textContent = ctx.live() ? "No scalars reported yet; they appear here as the replicas report them."
          : "This experiment reported no scalars. A training script reports them with "
            + "task.get_logger().report_scalar(title, series, value, iteration).";
      } else status.textContent = "";
      status.hidden = !!names.length;
      controls.hidden = !training.length;
      sysHead.hidden = training.length === names.length;
      const fetched = await Promise.all(names.map((t) => api.metric(id, t, { max_points: MAX_POINTS, x: viewOf(t).xMode === "step" ? "step" : "time" })));
      data.clear();
      names.forEach((t, i) => data.set(t, fetched[i]));
      draw();
    } catch (err) {
      status.hidden = false;
      status.textContent = `Could not load scalars: ${err.message}`;
    }
    // Reload while the experiment runs, and once more after it ends (its last points).
    if (ctx.live()) { wasLive = true; timer = setTimeout(load, liveMs()); }
    else if (wasLive) { wasLive = false; timer = setTimeout(load, 1000); }
  }

  load();
  return () => { clearTimeout(timer); for (const c of charts.values()) c.destroy(); };
}

// the declared params (the file's params after --param, an estimator's script_params; a trial's
// sampled values) first, then what the script reported
const SECTION_ORDER = ["Declared", "Trial", "Args", "General"];

export function groupParams(params) {
  const sections = new Map();
  for (const p of params) {
    if (!sections.has(p.section)) sections.set(p.section, []);
    sections.get(p.section).push(p);
  }
  const names = [...sections.keys()].sort((a, b) => {
    const ia = SECTION_ORDER.indexOf(a);
    const ib = SECTION_ORDER.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
  });
  return names.map((n) => [n, sections.get(n).sort((a, b) => a.key.localeCompare(b.key) || byReplica(a.replica, b.replica))]);
}

export async function renderParams(panel, id) {
  const params = await api.params(id);
  if (!params.length) { add(panel, h("div", { class: "empty" }, "No hyperparameters. The experiment file's params are recorded as Declared; a training script records more with task.connect(dict) (argparse arguments are recorded as Args).")); return; }
  for (const [section, rows] of groupParams(params)) {
    add(panel, 
      h("h2", {}, section, " ", h("span", { class: "muted small" }, `${rows.length}`)),
      h("div", { class: "table-wrap" }, h("table", { class: "grid params-table", "data-section": section },
        h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "value"), h("th", {}, "replica"), h("th", {}, "rank"))),
        h("tbody", {}, rows.map((p) => h("tr", { "data-key": p.key, "data-replica": p.replica, class: p.conflict ? "conflict" : "" },
          h("td", { class: "key mono" }, p.key),
          // a declared value the script reported differently: both sides say what the other holds
          h("td", { class: "value" }, fmtValue(p.value), p.conflict ? h("span", { class: "conflict-note", title: "declared and reported values differ" }, ` ≠ ${p.conflict}`) : null),
          h("td", {}, p.replica), h("td", { class: "num" }, p.rank ?? "—")))))),
    );
  }
}

export async function renderArtifacts(panel, id) {
  // the Logger's images, histograms and tables have their own tab (Debug samples)
  const artifacts = (await api.artifacts(id)).filter((a) => a.kind !== "report");
  if (!artifacts.length) { add(panel, h("div", { class: "empty" }, "No artifacts uploaded. A training script uploads one with task.upload_artifact(name, artifact_object=...).")); return; }
  artifacts.sort((a, b) => a.name.localeCompare(b.name));
  const preview = h("div", { class: "card preview", id: "artifact-preview" }, h("p", { class: "muted" }, "Select an artifact to preview it."));
  const rows = new Map();
  async function show(a) {
    for (const [name, tr] of rows) tr.classList.toggle("selected", name === a.name);
    add(clear(preview), h("h3", { style: { marginTop: 0 } }, a.name, " ", h("span", { class: "muted small" }, `${a.kind} · ${a.content_type}`)));
    try {
      const p = await api.preview(id, a.name);
      if (p.preview === "image") add(preview, h("img", { src: api.artifactUrl(id, a.name, true), alt: a.name }));
      else if (p.preview === "json" || p.preview === "text") add(preview, h("pre", {}, p.text), p.truncated ? h("p", { class: "muted small" }, "Preview truncated; download for the whole file.") : null);
      else if (p.preview === "files") add(preview, h("ul", { class: "mono" }, p.files.map((f) => h("li", {}, f))));
      else add(preview, h("p", { class: "muted" }, "No preview for this kind of file."));
    } catch (err) {
      add(preview, h("p", { class: "muted" }, `No preview: ${err.message}`));
    }
    add(preview, h("p", {}, h("a", { href: api.artifactUrl(id, a.name), download: "" }, "Download")));
  }
  const table = h("table", { class: "grid", id: "artifacts" },
    h("thead", {}, h("tr", {}, ["name", "kind", "size", "replica", "uploaded", ""].map((c) => h("th", {}, c)))),
    h("tbody", {}, artifacts.map((a) => {
      const tr = h("tr", { "data-name": a.name, style: { cursor: "pointer" }, onclick: () => show(a) },
        h("td", {}, h("a", { href: "#artifacts", onclick: (ev) => ev.preventDefault() }, a.name)),
        h("td", {}, a.kind), h("td", { class: "num" }, fmtBytes(a.size)), h("td", {}, a.replica),
        h("td", { class: "num" }, fmtTime(a.time)),
        h("td", {}, h("a", { href: api.artifactUrl(id, a.name), download: "", onclick: (ev) => ev.stopPropagation() }, "download")));
      rows.set(a.name, tr);
      return tr;
    })));
  add(panel, h("div", { class: "split" }, h("div", { class: "table-wrap" }, table), preview));
  show(artifacts[0]);
}

export async function renderModels(panel, id) {
  const models = await api.models(id);
  if (!models.length) {
    add(panel, h("div", { class: "empty" }, "No models saved. In a training script: task.save_model(model, \"name\", example_input=x)."));
    return;
  }
  add(panel, h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "models" },
    h("thead", {}, h("tr", {}, ["name", "format", "size", "replica", "saved", "details", ""].map((c) => h("th", {}, c)))),
    h("tbody", {}, models.map((m) => h("tr", { "data-name": m.name },
      h("td", {}, m.name), h("td", {}, m.format), h("td", { class: "num" }, fmtBytes(m.size)), h("td", {}, m.replica),
      h("td", { class: "num" }, fmtTime(m.time)),
      h("td", { class: "small" }, modelDetails(m.metadata || {})),
      h("td", {}, h("a", { href: api.modelUrl(id, models.filter((x) => x.name === m.name).length > 1 ? `${m.name}.${m.format}` : m.name), download: "" }, "download"))))))));
}

// The few facts a reader wants first (opset, the ONNX check, parameter count...), then everything.
function modelDetails(meta) {
  const facts = [];
  for (const key of ["exporter", "opset", "content", "parameters", "device", "class"]) {
    if (meta[key] !== undefined && typeof meta[key] !== "object") facts.push(`${key}: ${meta[key]}`);
  }
  const check = meta.check;
  if (check && typeof check === "object" && "passed" in check) {
    facts.push(check.passed ? `checked with ${check.runtime || "a runtime"}: max diff ${Number(check.max_abs_diff).toExponential(1)}` : "check FAILED");
  }
  if (!Object.keys(meta).length) return "";
  return [
    h("div", { class: "chips" }, facts.map((f) => h("span", { class: "tag" }, f))),
    h("details", {}, h("summary", { class: "muted" }, "all details"), h("pre", { class: "mono" }, JSON.stringify(meta, null, 2))),
  ];
}
