// Experiment groups: /groups (every hyperparameter search) and /groups/{id} (its trials table,
// sortable by the metric or any param, the best trial marked, parallel coordinates of params
// against the metric). Refreshed every few seconds while the group runs.

import { badge, clear, fmtTime, h, add, runColor } from "./util.js";

async function getJson(path) {
  const res = await fetch(`/api/v1${path}`, { credentials: "same-origin" });
  if (res.status === 401) { location.href = `/login?next=${encodeURIComponent(location.pathname)}`; throw new Error("sign in"); }
  if (!res.ok) {
    let body = {};
    try { body = await res.json(); } catch { /* not JSON */ }
    throw new Error(body.message || res.statusText);
  }
  return res.json();
}

const fmt = (v) => (v === null || v === undefined ? "—" : typeof v === "number" ? String(Number(v.toPrecision(4))) : String(v));

export async function renderGroups(root) {
  clear(root);
  add(root, h("div", { class: "toolbar" }, h("h1", {}, "Groups")));
  let groups;
  try { groups = await getJson("/groups"); } catch (e) { add(root, h("p", { class: "error" }, String(e.message))); return; }
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
  const state = { sort: "value", desc: false, doc: null };
  let timer = null;

  async function load() {
    try { state.doc = await getJson(`/groups/${encodeURIComponent(groupId)}`); } catch (e) {
      clear(root); add(root, h("p", { class: "error" }, String(e.message))); return;
    }
    draw();
    clearTimeout(timer);
    if (!["succeeded", "stopped", "failed"].includes(state.doc.status) && ctx.alive()) timer = setTimeout(load, 3000);
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
        h("span", { class: "muted" }, ` ${g.search} search · ${g.trials.length}/${g.planned} trials · ${g.concurrency} at a time`)),
      g.reason ? h("p", { class: "muted" }, g.reason) : null,
      g.trials.length ? h("p", {}, h("a", { id: "overlay", href: `/compare?ids=${g.trials.map((t) => t.experiment_id).join(",")}` },
        "Every trial's scalars overlaid (Compare)")) : null,
      g.best ? h("p", { id: "best" }, `Best: trial ${g.best.number} (`, h("a", { href: `/experiments/${g.best.experiment_id}` }, g.best.experiment_id),
        `) ${metric} ${fmt(g.best.value)} — `, Object.entries(g.best.params).map(([k, v]) => `${k}=${fmt(v)}`).join(", ")) : null,
      h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "trials" },
        h("thead", {}, h("tr", {}, header("trial", "number"), h("th", {}, "experiment"), header("state", "state"),
          header(metric, "value"), h("th", {}, "step"), names.map((n) => header(n, n)), h("th", {}, "reason"))),
        h("tbody", {}, rows))),
      h("h2", {}, "Parameters against the metric"),
      parallel(g.trials, names, metric, bestNo));
  }

  load();
}

// Parallel coordinates in plain SVG: one axis per param and one for the metric; a line per trial
// in the trial's own colour (as on its Scalars tab and in Compare; the best one thick, pruned ones
// dashed). Categorical params are spaced evenly in their order.
function parallel(trials, names, metric, bestNo) {
  const NS = "http://www.w3.org/2000/svg";
  const axes = [...names, "value"];
  const W = Math.max(420, 140 * axes.length), H = 260, top = 24, bottom = 30, left = 40, right = 40;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("id", "parallel");
  svg.setAttribute("width", "100%");
  svg.setAttribute("style", `max-width: ${W}px`);
  const el = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    svg.appendChild(e);
    return e;
  };
  const scored = trials.filter((t) => t.value !== null && t.value !== undefined);
  if (!scored.length) { const p = h("p", { class: "muted" }, "No trial has reported the metric yet."); return p; }
  const x = (i) => left + (i * (W - left - right)) / Math.max(1, axes.length - 1);
  const scales = axes.map((a) => {
    const vals = scored.map((t) => (a === "value" ? t.value : t.params[a]));
    if (vals.every((v) => typeof v === "number")) {
      const lo = Math.min(...vals), hi = Math.max(...vals);
      return { f: (v) => (hi === lo ? 0.5 : (v - lo) / (hi - lo)), lo: fmt(lo), hi: fmt(hi) };
    }
    const cats = [...new Set(vals.map(String))];
    return { f: (v) => (cats.length === 1 ? 0.5 : cats.indexOf(String(v)) / (cats.length - 1)), lo: cats[0], hi: cats[cats.length - 1] };
  });
  const y = (u) => H - bottom - u * (H - top - bottom);
  axes.forEach((a, i) => {
    el("line", { x1: x(i), x2: x(i), y1: top, y2: H - bottom, stroke: "#999" });
    el("text", { x: x(i), y: H - 8, "text-anchor": "middle", "font-size": 12 }, a === "value" ? metric : a);
    el("text", { x: x(i) + 4, y: top - 6, "font-size": 10, fill: "#666" }, scales[i].hi);
    el("text", { x: x(i) + 4, y: H - bottom + 12, "font-size": 10, fill: "#666" }, scales[i].lo);
  });
  for (const t of scored) {
    const pts = axes.map((a, i) => `${x(i)},${y(scales[i].f(a === "value" ? t.value : t.params[a]))}`).join(" ");
    const best = t.number === bestNo;
    el("polyline", {
      points: pts, fill: "none", stroke: runColor(t.experiment_id), "stroke-width": best ? 3 : 1.2,
      "stroke-opacity": best ? 1 : 0.55, "stroke-dasharray": t.state === "pruned" ? "4 3" : "none", "data-trial": t.number,
    });
  }
  return h("div", { class: "chart" }, svg);
}
