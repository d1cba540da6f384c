// The experiment page's Debug samples tab: what Logger.report_image / report_matplotlib_figure
// (images), report_histogram, report_table and report_plotly stored (artifacts of kind "report",
// their metadata: report, title, series, step, rank). One card per title, series and rank, with a
// step slider: images show the chosen step's picture, histograms its bars, tables its rows.

import { api } from "./api.js";
import { liveMs } from "./charts.js";
import { clear, fmtValue, h, add } from "./util.js";

const SECTIONS = [
  ["image", "Images", "report_image / report_matplotlib_figure"],
  ["histogram", "Histograms", "report_histogram"],
  ["table", "Tables", "report_table"],
  ["plotly", "Plotly figures", "report_plotly, report_line_plot, report_scatter2d/3d, report_confusion_matrix, report_surface"],
  ["media", "Media", "report_media"],
];

// [{report, title, series, rank, steps: [{step, name}] (ascending)}], by title, series, rank
export function groupReports(records) {
  const groups = new Map();
  for (const r of records) {
    const m = r.metadata || {};
    if (!m.report || m.step === undefined) continue;
    const rank = m.rank ?? r.rank ?? null;
    const key = JSON.stringify([m.report, m.title, m.series, rank]);
    if (!groups.has(key)) groups.set(key, { report: m.report, title: String(m.title), series: String(m.series), rank, steps: [] });
    groups.get(key).steps.push({ step: Number(m.step), name: r.name });
  }
  const out = [...groups.values()];
  for (const g of out) g.steps.sort((a, b) => a.step - b.step);
  return out.sort((a, b) => a.title.localeCompare(b.title) || a.series.localeCompare(b.series) || (a.rank ?? -1) - (b.rank ?? -1));
}

export function renderSamples(panel, ctx, id) {
  let timer = null;
  let shown = "";
  const status = h("p", { class: "muted" }, "Loading debug samples…");
  const body = h("div", { id: "samples" });
  add(panel, status, body);

  async function load() {
    clearTimeout(timer);
    try {
      const records = await api.reports(id);
      const groups = groupReports(records);
      const signature = JSON.stringify(groups.map((g) => [g.report, g.title, g.series, g.rank, g.steps.length]));
      if (!groups.length) {
        status.className = "empty";
        status.textContent = "No debug samples reported. A training script reports them with task.get_logger()"
          + ".report_image(title, series, iteration, image=...), report_histogram, report_table or report_matplotlib_figure.";
      } else status.textContent = "";
      status.hidden = !!groups.length;
      if (signature !== shown) { shown = signature; draw(groups); }
    } catch (err) {
      status.hidden = false;
      status.textContent = `Could not load debug samples: ${err.message}`;
    }
    if (ctx.live()) timer = setTimeout(load, liveMs());
  }

  function draw(groups) {
    clear(body);
    for (const [report, heading, how] of SECTIONS) {
      const mine = groups.filter((g) => g.report === report);
      if (!mine.length) continue;
      add(body, h("h2", {}, heading, " ", h("span", { class: "muted small" }, how)),
        h("div", { class: "samples", "data-report": report }, mine.map((g) => card(id, g))));
    }
  }

  load();
  return () => clearTimeout(timer);
}

// One title/series/rank: its newest step first, a slider over every step it reported.
function card(id, g) {
  const last = g.steps.length - 1;
  const label = h("span", { class: "mono step-label" });
  const view = h("div", { class: "sample-view" });
  const slider = h("input", { type: "range", min: 0, max: last, value: last, step: 1, class: "step-slider",
    "aria-label": `step of ${g.title} / ${g.series}`, disabled: last === 0 });
  let token = 0;
  async function show(i) {
    const { step, name } = g.steps[i];
    label.textContent = `step ${step}`;
    const mine = ++token;
    if (g.report === "image") {
      const img = view.querySelector("img") || add(view, h("img", { alt: `${g.title} / ${g.series}` })).lastChild;
      img.src = api.artifactUrl(id, name, true);
      img.dataset.step = String(step);
      return;
    }
    if (g.report === "plotly" || g.report === "media") {
      add(clear(view), h("a", { href: api.artifactUrl(id, name), download: "", "data-step": step },
        g.report === "plotly" ? "figure (plotly JSON)" : "download the file"));
      return;
    }
    try {
      const doc = await api.artifactJson(id, name);
      if (mine !== token) return; // a later step was chosen meanwhile
      clear(view).dataset.step = String(step);
      add(view, g.report === "histogram" ? histogram(doc) : table(doc));
    } catch (err) {
      add(clear(view), h("p", { class: "muted" }, `Could not load step ${step}: ${err.message}`));
    }
  }
  slider.addEventListener("input", () => show(Number(slider.value)));
  show(last);
  const who = g.rank === null ? "" : ` · rank ${g.rank}`;
  return h("div", { class: "card sample", "data-title": g.title, "data-series": g.series, "data-rank": g.rank ?? "" },
    h("h3", {}, g.title, " ", h("span", { class: "muted small" }, `${g.series}${who}`)),
    h("div", { class: "slider-row" }, slider, label, h("span", { class: "muted small" }, `${g.steps.length} step${g.steps.length === 1 ? "" : "s"}`)),
    view);
}

// Bars of each value (one group per bin, a bar per labelled series), as inline SVG.
function histogram(doc) {
  const rows = doc.values || [];
  const width = rows.length ? rows[0].length : 0;
  const all = rows.flat();
  const top = Math.max(0, ...all);
  const bottom = Math.min(0, ...all);
  const span = top - bottom || 1;
  const W = 320;
  const H = 140;
  const band = W / Math.max(rows.length, 1);
  const bar = Math.max(band / Math.max(width, 1) - 1, 1);
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "histogram");
  svg.setAttribute("role", "img");
  rows.forEach((row, i) => row.forEach((v, j) => {
    const r = document.createElementNS(NS, "rect");
    const y0 = H - ((Math.max(v, 0) - bottom) / span) * H;
    r.setAttribute("x", String(i * band + j * (bar + 1)));
    r.setAttribute("y", String(y0));
    r.setAttribute("width", String(bar));
    r.setAttribute("height", String((Math.abs(v) / span) * H));
    r.setAttribute("class", `bar s${j % 6}`);
    r.setAttribute("data-value", String(v));
    const tip = document.createElementNS(NS, "title");
    tip.textContent = `${doc.xlabels?.[i] ?? i}${doc.labels?.[j] ? ` (${doc.labels[j]})` : ""}: ${fmtValue(v)}`;
    r.append(tip);
    svg.append(r);
  }));
  const legend = doc.labels ? h("div", { class: "chips" }, doc.labels.map((l, j) => h("span", { class: `tag s${j % 6}` }, l))) : null;
  const axes = doc.xaxis || doc.yaxis ? h("p", { class: "muted small" }, [doc.xaxis, doc.yaxis].filter(Boolean).join(" · ")) : null;
  return [svg, legend, axes];
}

function table(doc) {
  const columns = doc.columns || [];
  return h("div", { class: "table-wrap" }, h("table", { class: "grid report-table" },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, (doc.rows || []).map((r) => h("tr", {}, r.map((v) => h("td", { class: typeof v === "number" ? "num" : "" }, fmtValue(v))))))));
}
