// /sweep: sweep analysis of any set of runs, the run table's filters (/sweep?where=…&q=…) or a
// selection (/sweep?ids=a,b,c), with the same view as a group's page (sweep.js): parallel
// coordinates that filter the runs table below, a param-vs-metric scatter, the params' importance
// (computed on the server, in the background: asked again until ready) and the best metric so far.
// The metric and goal are in the address, so a link shows the same analysis.

import { api } from "./api.js";
import { sweepAnalysis } from "./sweep.js";
import { add, badge, clear, plural, fmtShort, fmtValue, h } from "./util.js";

const FILTERS = ["q", "status", "project", "tag", "where", "group", "ids"];

export function renderSweep(root, ctx) {
  const params = new URLSearchParams(location.search);
  const state = {
    metric: params.get("metric") || "", goal: params.get("goal") || "", doc: null, brushes: {}, axes: {},
    dragging: false, stale: false, // not redrawn under a brush being dragged: drawn when it ends
  };
  let timer = null;
  const filters = {};
  for (const k of FILTERS) if (params.get(k)) filters[k] = params.get(k);

  const metricPick = h("select", { "aria-label": "metric", id: "sweep-metric", onchange: () => { state.metric = metricPick.value; state.brushes = {}; load(); } });
  const goalPick = h("select", { "aria-label": "goal", id: "sweep-goal", onchange: () => { state.goal = goalPick.value; draw(); } },
    h("option", { value: "min" }, "lower is better"), h("option", { value: "max" }, "higher is better"));
  const body = h("div", { id: "sweep-body" });
  const scope = filters.ids ? `${filters.ids.split(",").length} selected runs`
    : Object.entries(filters).map(([k, v]) => `${k}: ${v}`).join(" · ") || "every run";
  add(clear(root),
    h("div", { class: "toolbar" }, h("h1", {}, "Sweep analysis"), h("span", { class: "muted", id: "sweep-scope" }, scope)),
    h("div", { class: "toolbar" }, h("label", {}, "metric ", metricPick), goalPick,
      h("a", { href: backLink() }, "back to the runs")),
    body);

  function backLink() {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(filters)) if (k !== "ids" && k !== "group") q.set(k, v);
    return q.toString() ? `/?${q}` : "/";
  }

  function address() {
    const q = new URLSearchParams(filters);
    if (state.metric) q.set("metric", state.metric);
    if (state.goal) q.set("goal", state.goal);
    history.replaceState(null, "", `/sweep?${q}`);
  }

  api.columns().then((c) => {
    const choices = c.metrics.flatMap((t) => ["last", "min", "max"].map((a) => `metric:${a}:${t}`));
    add(clear(metricPick), choices.map((m) => h("option", { value: m }, m.replace(/^metric:(\w+):(.*)$/, "$2 ($1)"))));
    if (!state.metric || !choices.includes(state.metric)) state.metric = state.metric || choices[0] || "";
    metricPick.value = state.metric;
    if (!state.metric) { add(clear(body), h("p", { class: "muted" }, "No run has reported a metric yet.")); return; }
    load();
  }).catch((e) => add(clear(body), h("p", { class: "error" }, String(e.message))));

  let loads = 0;
  async function load(tries = 0) {
    clearTimeout(timer);
    const ticket = ++loads;
    address();
    try {
      const doc = await api.sweep({ ...filters, metric: state.metric });
      if (ticket !== loads) return;
      state.doc = doc;
      if (state.dragging) state.stale = true; else draw();
      // importance is computed in the background: ask again until it is there (bounded)
      if (!doc.importance.ready && tries < 40 && ctx.alive()) timer = setTimeout(() => load(tries + 1), 250 * Math.min(8, tries + 1));
    } catch (e) {
      if (ticket === loads) add(clear(body), h("p", { class: "error", id: "sweep-error" }, String(e.message)));
    }
  }

  function draw() {
    const doc = state.doc;
    const title = doc.metric.replace(/^metric:(\w+):(.*)$/, "$2");
    const goal = state.goal || (/loss|err|time|perplex/i.test(title) || doc.metric.startsWith("metric:min:") ? "min" : "max");
    goalPick.value = goal;
    const trials = doc.runs.map((r, i) => ({ number: i, experiment_id: r.id, params: r.params, value: r.value,
      state: "done", name: r.name, finished: r.finished_at || r.created_at }));
    const scored = trials.filter((t) => t.value !== null);
    let bestNo = null;
    for (const t of scored) if (bestNo === null || (goal === "max" ? t.value > trials[bestNo].value : t.value < trials[bestNo].value)) bestNo = t.number;
    const shown = h("span", { class: "muted small", id: "brushed" });
    const rows = trials.map((t) => h("tr", { "data-trial": t.number, "data-id": t.experiment_id, class: t.number === bestNo ? "best" : "" },
      h("td", { class: "mono" }, h("a", { href: `/experiments/${encodeURIComponent(t.experiment_id)}` }, t.experiment_id)),
      h("td", {}, t.number === bestNo ? `★ ${t.name}` : t.name), h("td", {}, badge(doc.runs[t.number].status)),
      h("td", { class: "num", title: t.value === null ? null : fmtValue(t.value) }, t.value === null ? "—" : fmtShort(t.value)),
      doc.params.map((n) => h("td", { class: "num", title: n in t.params ? fmtValue(t.params[n]) : null }, n in t.params ? fmtShort(t.params[n]) : "—"))));
    const onFilter = (keep) => {
      for (const tr of rows) tr.hidden = keep !== null && !keep.has(Number(tr.dataset.trial));
      shown.textContent = keep === null ? "" : `${keep.size} of ${plural(trials.length, "run")} inside the brushes`;
    };
    const imp = doc.importance.ready ? doc.importance.values : null;
    add(clear(body),
      doc.missing.length ? h("p", { class: "muted" }, `Not found (left out): ${doc.missing.join(", ")}`) : null,
      doc.total > doc.runs.length ? h("p", { class: "muted" }, `The first ${doc.runs.length} of ${doc.total} runs.`) : null,
      h("p", { class: "muted", id: "sweep-count" }, `${plural(doc.runs.length, "run")}, ${scored.length} with ${title}; ${plural(doc.params.length, "param")} ${doc.params.length === 1 ? "varies" : "vary"}.`),
      h("h2", {}, "Parameters against the metric ", shown),
      sweepAnalysis(trials, doc.params, title, bestNo, { brushes: state.brushes, onFilter, importance: imp, goal,
        label: (t) => `${t.name} (${t.experiment_id})`, when: (t) => t.finished, whenLabel: "time",
        axes: state.axes, onAxis: (a, kind) => { state.axes[a] = kind; draw(); },
        onDrag: (on) => { state.dragging = on; if (!on && state.stale) { state.stale = false; draw(); } } }),
      h("p", { class: "muted small" }, `Importance: ${doc.importance.method}.`),
      h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "sweep-runs" },
        h("thead", {}, h("tr", {}, h("th", {}, "id"), h("th", {}, "name"), h("th", {}, "status"), h("th", {}, title),
          doc.params.map((n) => h("th", {}, n)))),
        h("tbody", {}, rows))));
  }

  return () => clearTimeout(timer);
}
