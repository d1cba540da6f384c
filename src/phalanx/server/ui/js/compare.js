// Compare: two or more experiments, their scalars overlaid and their hyperparameters side by side,
// rows that differ marked.

import { api } from "./api.js";
import { MAX_POINTS, ScalarChart, chartControls, firstTime, lineModes, toLine } from "./charts.js";
import { diffView } from "./repro.js";
import { assignRunColours, badge, byReplica, clear, color, fmtAgo, fmtValue, h, runColor, topologyText, add } from "./util.js";

const EMPTY = { steps: [], values: [], times: [], count: 0 };

export function renderCompare(root, ctx) {
  const ids = (new URLSearchParams(location.search).get("ids") || "").split(",").map((s) => s.trim()).filter(Boolean);
  if (ids.length < 2) return renderPicker(root, ids);
  add(clear(root), h("p", { class: "muted" }, "Loading…"));
  const charts = [];
  (async () => {
    // One request for every run, its params and its titles (GET /compare?ids=). An id that no
    // longer exists (deleted, mistyped) is left out and named, not a dead end.
    let doc;
    try { doc = await api.compare(ids); } catch (err) {
      add(clear(root), h("p", { class: "error" }, `Could not compare: ${err.message}`));
      return;
    }
    const exps = doc.experiments;
    const missing = doc.missing;
    const missingNote = missing.length
      ? h("div", { class: "alert warn", id: "compare-missing" }, `Left out (no such experiment): ${missing.join(", ")}`) : null;
    if (exps.length < 2) { renderPicker(root, exps.map((e) => e.id), missingNote); return; }
    assignRunColours(exps.map((e) => e.id)); // runs drawn together: hues far apart (kept for their own pages)
    const state = { smoothing: 0, log: false, xMode: "step", lines: "each", aggregate: false };
    const paramsOf = exps.map((e) => doc.params[e.id] || []);
    // the params whose value differs between the runs: what "group by" offers
    const values = new Map(); // key -> [value text per experiment]
    paramsOf.forEach((params, ei) => {
      for (const p of params) {
        if (!values.has(p.key)) values.set(p.key, exps.map(() => new Set()));
        values.get(p.key)[ei].add(fmtValue(p.value));
      }
    });
    const valueOf = (key, ei) => [...values.get(key)[ei]].sort().join(" | ") || "—";
    const groupable = [...values.keys()].filter((k) => new Set(exps.map((_, ei) => valueOf(k, ei))).size > 1).sort();
    const groupValues = new Map(groupable.map((k) => [k, [...new Set(exps.map((_, ei) => valueOf(k, ei)))].sort()]));
    // runs grouped by their tags (the set of them, "no tags" for none) when the runs' tags differ
    const tagsOf = (e) => ((e.tags || []).length ? [...e.tags].sort().join(", ") : "no tags");
    const tagGroups = [...new Set(exps.map(tagsOf))].sort();
    const modes = lineModes(state, [["each", "each series"], ["ranks", "each run: mean of its ranks, band"],
      ...groupable.map((k) => [`param:${k}`, `group by ${k}: mean, band`]),
      ...(tagGroups.length > 1 ? [["tags", "group by tags: mean, band"]] : [])], () => draw());
    // the toolbar's changes: a new x axis fetches again (reload), the rest redraws
    const controls = add(chartControls(state, (refetch) => (refetch ? reload() : draw())), h("span", { style: { width: "16px" } }), modes);
    const grid = h("div", { class: "charts", id: "compare-charts" });
    // system metrics (CPU, memory, GPU of each replica) fold away: drawn, and fetched, when opened
    const systemGrid = h("div", { class: "charts", id: "compare-system-charts" });
    const systemBox = h("details", { id: "compare-system" }, h("summary", {}, "System"), systemGrid);
    const paramsBox = h("div", { id: "compare-params" });
    // the diffs against the first run: asked for when opened (n - 1 of them)
    const diffBox = h("div", { id: "compare-diff" }, h("p", { class: "muted" }, "Loading…"));
    const diffFold = h("details", { id: "compare-diff-fold" }, h("summary", {}, "What ran ",
      h("span", { class: "muted small" }, `params, file, code and packages of each against ${label(exps[0])} (phalanx diff)`)), diffBox);
    add(clear(root), 
      h("div", { class: "toolbar" }, h("h1", {}, `Compare ${exps.length} experiments`), h("span", { class: "spacer" }),
        h("a", { href: `/compare?ids=${ids.join(",")}&pick=1`, onclick: (ev) => { ev.preventDefault(); renderPicker(root, exps.map((e) => e.id)); } }, "change selection")),
      missingNote,
      h("div", { class: "cmp-heads" }, exps.map((e) => h("div", { class: "card", "data-id": e.id },
        h("div", {}, h("a", { href: `/experiments/${e.id}` }, h("b", {}, e.name)), " ", badge(e.status)),
        h("div", { class: "muted small mono" }, e.id),
        h("div", { class: "small" }, `${e.project} · ${e.framework || "—"} · ${topologyText(e.topology)}`),
        h("div", { class: "muted small" }, h("span", { class: "swatch", style: { background: runColor(e.id) } }), " its colour in the charts")))),
      h("h2", {}, "Scalars"),
      controls,
      grid,
      systemBox,
      h("h2", {}, "Hyperparameters"),
      paramsBox,
      diffFold,
    );

    const metrics = new Map(); // title -> [[exp, metric]]
    function label(e) { return `${e.name} (${e.id.slice(0, 6)})`; }
    // Series s (i of n) of experiment e as a line: the run's colour (ranks in shades), and its group
    // (the run, or the value of the chosen param: one colour per value).
    function decorate(line, e, i, n) {
      const out = { ...line, color: runColor(e.id, i, n), group: e.id, groupLabel: label(e), groupColor: runColor(e.id) };
      if (state.lines.startsWith("param:")) {
        const key = state.lines.slice(6);
        const value = valueOf(key, exps.indexOf(e));
        out.group = `${key}=${value}`;
        out.groupLabel = out.group;
        out.groupColor = out.color = color(groupValues.get(key).indexOf(value));
      } else if (state.lines === "tags") {
        out.group = out.groupLabel = `tags: ${tagsOf(e)}`;
        out.groupColor = out.color = color(tagGroups.indexOf(tagsOf(e)));
      }
      return out;
    }
    const isSystem = (t) => t.startsWith("system/");
    const titles = new Map(); // title -> ids of the runs that have it
    for (const e of exps) for (const t of Object.keys(doc.titles[e.id] || {})) {
      if (!titles.has(t)) titles.set(t, []);
      titles.get(t).push(e.id);
    }
    const byId = new Map(exps.map((e, ei) => [e.id, [e, ei]]));
    // points per series: a chart of many runs stays as light as a chart of a few (~40,000 points,
    // at most MAX_POINTS a series, at least 100): 200 series of 100 runs get 200 points each
    const seriesOf = (t) => exps.reduce((n, e) => n + ((doc.titles[e.id] || {})[t] || []).length, 0);
    const perSeries = (t) => Math.max(100, Math.min(MAX_POINTS, Math.floor(40000 / Math.max(1, seriesOf(t)))));
    const axis = () => (state.xMode === "step" ? "step" : "time");
    const loaded = { main: false, system: false };
    function draw() {
      // Each experiment's own start, so "relative time" lines experiments up.
      const starts = new Map(exps.map((e) => [e.id, firstTime([...metrics.values()].flat().filter(([x]) => x.id === e.id).map(([, m]) => m))]));
      for (const c of charts) c.destroy();
      charts.length = 0;
      for (const title of [...metrics.keys()].sort()) {
        const entries = metrics.get(title);
        // Zoomed in: each experiment's series restricted to the visible range (in its own time):
        // one request for all of them, or one per run on the relative axis (each its own offset).
        const detail = async (min, max) => {
          const range = { max_points: perSeries(title), x: axis() };
          let parts;
          if (state.xMode === "relative") {
            parts = await Promise.all(entries.map(([e, m]) => {
              const off = starts.get(e.id);
              return api.metric(e.id, title, { ...range, x_min: min + off, x_max: max + off }).then((d) => [e, m, d, off]);
            }));
          } else {
            const got = await api.metricOfRuns(title, entries.map(([e]) => e.id), { ...range, x_min: min, x_max: max });
            parts = entries.map(([e, m]) => [e, m, got[e.id] || { series: {} }, 0]);
          }
          const out = [];
          for (const [e, m, d, off] of parts) {
            const names = Object.keys(m.series).sort();
            names.forEach((s, i) => out.push(decorate(toLine(s, d.series[s] || EMPTY, state.xMode, off), e, i, names.length)));
          }
          return out;
        };
        const chart = new ScalarChart(isSystem(title) ? systemGrid : grid, title, detail);
        charts.push(chart);
        const lines = [];
        // Each experiment its own colour (the one it has on its own Scalars tab), its series
        // (ranks) shades of it.
        entries.forEach(([e, m]) => {
          const names = Object.keys(m.series).sort();
          names.forEach((s, i) => {
            lines.push(decorate(toLine(`${label(e)} · ${s}`, m.series[s], state.xMode, starts.get(e.id)), e, i, names.length));
          });
        });
        chart.update(lines, state);
      }
      const main = [...titles.keys()].filter((t) => !isSystem(t)).length;
      if (!main) add(grid, h("p", { class: "muted" }, "None of these experiments reported scalars."));
      systemBox.querySelector("summary").textContent = `System (${[...titles.keys()].filter(isSystem).length} charts: CPU, memory, GPU of each replica)`;
    }
    // One request per title for every run that has it (GET /metrics/TITLE?ids=).
    async function loadScalars(which) {
      for (const t of [...metrics.keys()]) if (isSystem(t) === (which === "system")) metrics.delete(t);
      const wanted = [...titles.keys()].filter((t) => isSystem(t) === (which === "system"));
      await Promise.all(wanted.map((t) => api.metricOfRuns(t, titles.get(t), { max_points: perSeries(t), x: axis() }).then((got) => {
        const list = Object.entries(got).filter(([id]) => byId.has(id)).map(([id, m]) => [...byId.get(id), m]).map(([e, ei, m]) => [e, m, ei]);
        list.sort((a, b) => a[2] - b[2]);
        metrics.set(t, list);
      })));
      loaded[which] = true;
      draw();
    }
    const reload = () => Promise.all(Object.keys(loaded).filter((k) => loaded[k]).map((k) => loadScalars(k)));
    systemBox.addEventListener("toggle", () => { if (systemBox.open && !loaded.system) loadScalars("system"); });
    loadScalars("main");
    // the first experiment against each other one, as `phalanx diff A B` shows them: when opened
    diffFold.addEventListener("toggle", () => {
      if (!diffFold.open || diffBox.dataset.loaded) return;
      diffBox.dataset.loaded = "true";
      Promise.all(exps.slice(1).map((e) => api.diff(exps[0].id, e.id).then((d) => diffView(d, label(exps[0]), label(e)),
        (err) => h("p", { class: "muted" }, `Could not diff ${exps[0].id} and ${e.id}: ${err.message}`))))
        .then((views) => add(clear(diffBox), views));
    });
    if (exps.length <= 3) diffFold.open = true; // a few diffs are cheap: shown at once
    drawParams(paramsBox, exps, paramsOf);
  })();
  return () => { for (const c of charts) c.destroy(); };
}

// One cell per experiment: the value, or each replica's value when the replicas disagree.
function cellText(records) {
  if (!records || !records.length) return null;
  const values = new Map();
  for (const r of [...records].sort((a, b) => byReplica(a.replica, b.replica))) {
    const v = fmtValue(r.value);
    if (!values.has(v)) values.set(v, []);
    values.get(v).push(r.replica);
  }
  // a declared value the script reported differently says so in the cell (never hidden)
  const conflict = records.find((r) => r.conflict);
  const note = conflict ? ` ≠ ${conflict.conflict}` : "";
  if (values.size === 1) return [...values.keys()][0] + note;
  return [...values.entries()].map(([v, reps]) => `${v} (${reps.join(", ")})`).join("; ") + note;
}

function drawParams(box, exps, allParams) {
  const rows = new Map(); // "section\u0000key" -> [records per experiment]
  allParams.forEach((params, ei) => {
    for (const p of params) {
      const k = `${p.section}\u0000${p.key}`;
      if (!rows.has(k)) rows.set(k, exps.map(() => []));
      rows.get(k)[ei].push(p);
    }
  });
  if (!rows.size) { add(box, h("p", { class: "muted" }, "No hyperparameters reported.")); return; }
  const keys = [...rows.keys()].sort((a, b) => {
    const [sa, ka] = a.split("\u0000");
    const [sb, kb] = b.split("\u0000");
    const rank = (s) => { const i = ["Declared", "Trial", "Args", "General"].indexOf(s); return i < 0 ? 9 : i; };
    return rank(sa) - rank(sb) || sa.localeCompare(sb) || ka.localeCompare(kb);
  });
  const onlyDiff = h("input", { type: "checkbox", id: "only-diff" });
  const tbody = h("tbody");
  let differing = 0;
  for (const k of keys) {
    const [section, key] = k.split("\u0000");
    const cells = rows.get(k).map(cellText);
    const differs = new Set(cells.map((c) => c ?? "\u0000missing")).size > 1;
    if (differs) differing++;
    add(tbody, h("tr", { class: differs ? "differs" : "", "data-key": key },
      h("td", { class: "muted" }, section), h("td", { class: "key mono" }, key),
      cells.map((c) => h("td", { class: "value" }, c ?? "—"))));
  }
  onlyDiff.addEventListener("change", () => {
    for (const tr of tbody.children) tr.hidden = onlyDiff.checked && !tr.classList.contains("differs");
  });
  add(box, 
    h("div", { class: "toolbar" }, onlyDiff, h("label", { for: "only-diff" }, "only differences"),
      h("span", { class: "muted small" }, `${differing} of ${keys.length} differ`)),
    h("div", { class: "table-wrap" }, h("table", { class: "grid params-table", id: "compare-params-table" },
      h("thead", {}, h("tr", {}, h("th", {}, "section"), h("th", {}, "name"), exps.map((e) => h("th", { class: "exp-col", title: e.id }, `${e.name} (${e.id.slice(0, 6)})`)))),
      tbody)),
  );
}

function renderPicker(root, preselected, note = null) {
  const chosen = new Set(preselected);
  const go = h("button", { class: "primary", onclick: () => { location.href = `/compare?ids=${[...chosen].join(",")}`; } }, "Compare");
  const update = () => { go.disabled = chosen.size < 2; go.textContent = `Compare (${chosen.size})`; };
  const tbody = h("tbody");
  add(clear(root), 
    h("div", { class: "toolbar" }, h("h1", {}, "Compare experiments"), h("span", { class: "spacer" }), go),
    note,
    h("p", { class: "muted" }, "Pick two or more experiments."),
    h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "pick" },
      h("thead", {}, h("tr", {}, ["", "id", "name", "project", "status", "topology", "started"].map((c) => h("th", {}, c)))), tbody)),
  );
  update();
  api.experiments({ limit: 200 }).then((page) => {
    for (const e of page.items) {
      const box = h("input", { type: "checkbox", "aria-label": `select ${e.id}`, onchange: (ev) => {
        if (ev.target.checked) chosen.add(e.id); else chosen.delete(e.id);
        update();
      } });
      box.checked = chosen.has(e.id);
      add(tbody, h("tr", { "data-id": e.id }, h("td", {}, box), h("td", { class: "mono" }, e.id), h("td", {}, e.name),
        h("td", {}, e.project), h("td", {}, badge(e.status)), h("td", {}, topologyText(e.topology)),
        h("td", { class: "num" }, fmtAgo(e.started_at || e.created_at))));
    }
    if (!page.items.length) add(tbody, h("tr", {}, h("td", { colspan: 7, class: "empty" }, "No experiments yet.")));
  });
  return () => {};
}
