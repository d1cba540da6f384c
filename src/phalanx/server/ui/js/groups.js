// Experiment groups: /groups (every hyperparameter search) and /groups/{id} (its trials table,
// sortable by the metric or any param, the best trial marked, sweep analysis in sweep.js:
// brushable parallel coordinates, a scatter and param importance). Refreshed every few seconds while the group runs.

import { api } from "./api.js";
import { tensorboardButton } from "./services.js";
import { sweepAnalysis } from "./sweep.js";
import { badge, clear, plural, fmtTime, h, add } from "./util.js";

const ended = (status) => ["succeeded", "stopped", "failed"].includes(status);

// an ended group's Delete (the project's admins: the API answers anybody else's with why)
function deleteButton(g) {
  const button = h("button", { class: "danger", id: "delete-group", onclick: async () => {
    if (!confirm(`Delete group ${g.id} with the experiments of its ${plural(g.trials.length, "trial")} and everything they reported? This cannot be undone.`)) return;
    button.disabled = true;
    try { await api.removeGroup(g.id); location.href = "/groups"; } catch (err) { alert(`Could not delete: ${err.message}`); button.disabled = false; }
  } }, "Delete");
  return button;
}

const fmt = (v) => (v === null || v === undefined ? "—" : typeof v === "number" ? String(Number(v.toPrecision(4))) : String(v));

export async function renderGroups(root) {
  clear(root);
  add(root, h("div", { class: "toolbar" }, h("h1", {}, "Groups")));
  let groups;
  try { groups = await api.groups(); } catch (e) { add(root, h("p", { class: "error" }, String(e.message))); return; }
  if (!groups.length) {
    add(root, h("p", { class: "muted" }, "No groups yet: `phalanx group run -f FILE` starts a hyperparameter search."));
    return;
  }
  const rows = groups.map((g) => h("tr", {},
    h("td", {}, h("a", { href: `/groups/${encodeURIComponent(g.id)}` }, g.id)),
    h("td", {}, g.name), h("td", {}, badge(g.status)), h("td", {}, g.search),
    h("td", {}, `${g.trials}/${g.planned}`), h("td", {}, g.metric ? `${g.metric} (${g.optimization})` : "—"),
    h("td", {}, fmtTime(g.created_at))));
  add(root, h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "groups" },
    h("thead", {}, h("tr", {}, ["id", "name", "status", "search", "trials", "metric", "created"].map((c) => h("th", {}, c)))),
    h("tbody", {}, rows))));
}

export function renderGroup(root, ctx, groupId) {
  const state = { sort: "value", desc: false, doc: null, brushes: {}, axes: {}, dragging: false, stale: false };
  let timer = null;

  async function load() {
    try { state.doc = await api.group(groupId); } catch (e) {
      clear(root); add(root, h("p", { class: "error" }, String(e.message))); return;
    }
    // not under a brush being dragged: the page is drawn again when the drag ends
    if (state.dragging) state.stale = true; else draw();
    clearTimeout(timer);
    if (!ended(state.doc.status) && ctx.alive()) timer = setTimeout(load, 3000);
  }

  function paramNames(trials) {
    const names = [];
    for (const t of trials) for (const k of Object.keys(t.params)) if (!names.includes(k)) names.push(k);
    return names;
  }

  function sorted(trials) {
    const key = state.sort;
    const get = (t) => (key === "value" ? t.value : key === "number" ? t.number : key === "state" ? t.state : t.params[key]);
    const out = [...trials].sort((a, b) => {
      const x = get(a), y = get(b);
      if (x === y) return a.number - b.number;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * (state.desc ? -1 : 1);
    });
    return out;
  }

  function draw() {
    const g = state.doc;
    const names = paramNames(g.trials);
    const bestNo = g.best ? g.best.number : null;
    const metric = g.metric || "metric";
    const header = (label, key) => h("th", { class: "sortable", "data-key": key, onclick: () => {
      if (state.sort === key) state.desc = !state.desc; else { state.sort = key; state.desc = false; }
      draw();
    } }, label + (state.sort === key ? (state.desc ? " ▼" : " ▲") : ""));
    const shown = h("span", { class: "muted small", id: "brushed" });
    const onFilter = (keep) => {
      for (const tr of rows) tr.hidden = keep !== null && !keep.has(Number(tr.dataset.trial));
      shown.textContent = keep === null ? "" : `${keep.size} of ${plural(g.trials.length, "trial")} inside the brushes`;
    };
    const rows = sorted(g.trials).map((t) => h("tr", { class: t.number === bestNo ? "best" : "", "data-trial": t.number },
      h("td", {}, t.number === bestNo ? `★ ${t.number}` : String(t.number)),
      h("td", {}, h("a", { href: `/experiments/${encodeURIComponent(t.experiment_id)}` }, t.experiment_id)),
      h("td", {}, badge(t.state === "done" ? "succeeded" : t.state === "pruned" ? "stopped" : t.state), t.state === "pruned" ? " pruned" : ""),
      h("td", {}, fmt(t.value)), h("td", {}, t.step ?? "—"),
      names.map((n) => h("td", {}, fmt(t.params[n]))),
      h("td", { class: "muted small" }, t.reason || "")));
    clear(root);
    add(root,
      h("div", { class: "toolbar" }, h("h1", {}, `Group ${g.name}`), badge(g.status),
        h("span", { class: "muted" }, ` ${g.search} search · ${g.trials.length}/${g.planned} trials · ${g.concurrency} at a time`),
        tensorboardButton({ group: g.id }), ended(g.status) ? deleteButton(g) : null),
      g.reason ? h("p", { class: "muted" }, g.reason) : null,
      g.trials.length ? h("p", {}, h("a", { id: "overlay", href: `/compare?ids=${g.trials.map((t) => t.experiment_id).join(",")}` },
        "Every trial's scalars overlaid (Compare)")) : null,
      g.best ? h("p", { id: "best" }, `Best: trial ${g.best.number} (`, h("a", { href: `/experiments/${g.best.experiment_id}` }, g.best.experiment_id),
        `) ${metric} ${fmt(g.best.value)} — `, Object.entries(g.best.params).map(([k, v]) => `${k}=${fmt(v)}`).join(", ")) : null,
      h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "trials" },
        h("thead", {}, h("tr", {}, header("trial", "number"), h("th", {}, "experiment"), header("state", "state"),
          header(metric, "value"), h("th", {}, "step"), names.map((n) => header(n, n)), h("th", {}, "reason"))),
        h("tbody", {}, rows))),
      h("h2", {}, "Parameters against the metric ", shown),
      sweepAnalysis(g.trials, names, metric, bestNo, { brushes: state.brushes, onFilter,
        // each axis as its param was sampled (the group's distributions), or as the user clicked it
        axes: { ...(g.axes || {}), ...state.axes }, onAxis: (a, kind) => { state.axes[a] = kind; draw(); },
        goal: String(g.optimization || "").startsWith("max") ? "max" : "min", onDrag: (on) => {
        state.dragging = on;
        if (!on && state.stale) { state.stale = false; draw(); }
      } }));
  }

  load();
}
