// Experiments: a sortable, filterable table, refreshed every few seconds while any experiment runs.

import { api } from "./api.js";
import { badge, clear, durationSeconds, fmtAgo, fmtDuration, fmtShort, fmtTime, fmtValue, h, topologyText, add } from "./util.js";

// Every column sorts on the server, over all pages (duration and topology are computed there).
const SERVER_SORTS = new Set(["created_at", "started_at", "name", "project", "status", "id", "framework",
  "topology", "duration", "group_id"]);
const COLUMNS = [
  ["", null], ["id", "id"], ["name", "name"], ["project", "project"], ["status", "status"],
  ["framework", "framework"], ["topology", "topology"], ["started", "started_at"], ["duration", "duration"], ["tags", null],
  ["group", "group_id"],
];
const STATUSES = ["", "created", "starting", "running", "succeeded", "failed", "stopped", "unknown", "queued"];
const PAGE = 50;

export function renderList(root, ctx) {
  const params = new URLSearchParams(location.search);
  const state = {
    q: params.get("q") || "", status: params.get("status") || "", project: params.get("project") || "",
    tag: params.get("tag") || "", sort: params.get("sort") || "-created_at", offset: Number(params.get("offset") || 0),
    selected: new Set(),
    // extra columns (param:KEY, metric:AGG:TITLE), sorted and filtered by the server across all pages
    cols: params.getAll("col").length ? params.getAll("col") : JSON.parse(localStorage.getItem("phalanx.columns") || "[]"),
    where: params.get("where") || "",
  };
  const isExtra = (key) => key.startsWith("param:") || key.startsWith("metric:");
  let timer = null;
  let items = [];
  // group id -> its name, for the group column (trials of a hyperparameter search link to its page)
  const groupNames = new Map();
  async function nameGroups(list) {
    if (!list.some((e) => e.group_id && !groupNames.has(e.group_id))) return;
    try { for (const g of await api.groups()) groupNames.set(g.id, g.name); } catch { /* the ids will do */ }
  }
  function groupCell(e) {
    if (!e.group_id) return h("td", { class: "group" }, "—");
    const name = groupNames.get(e.group_id);
    return h("td", { class: "group", title: `group ${e.group_id}` },
      h("a", { href: `/groups/${encodeURIComponent(e.group_id)}` }, name ? `${name} (${e.group_id.slice(0, 6)})` : e.group_id.slice(0, 12)));
  }

  const q = h("input", { type: "search", placeholder: "Search id, name or project", value: state.q, "aria-label": "search" });
  const status = h("select", { "aria-label": "status" }, STATUSES.map((s) => h("option", { value: s }, s || "any status")));
  status.value = state.status;
  const project = h("input", { type: "text", placeholder: "project", value: state.project, size: 14, "aria-label": "project" });
  const tag = h("input", { type: "text", placeholder: "tag", value: state.tag, size: 10, "aria-label": "tag" });
  const compare = h("button", { class: "primary", disabled: true, onclick: () => {
    location.href = `/compare?ids=${[...state.selected].join(",")}`;
  } }, "Compare");
  const counter = h("span", { class: "muted" });
  // The whole table as CSV (every page, same filters, order and columns, full precision).
  const exportCsv = h("a", { class: "button", id: "export-csv", href: "/api/v1/experiments.csv", download: "experiments.csv" }, "Export CSV");
  const choices = h("datalist", { id: "column-choices" });
  const addCol = h("input", { type: "text", list: "column-choices", placeholder: "+ column (param:…, metric:max:…)",
    size: 26, "aria-label": "add column", onkeydown: (ev) => {
      if (ev.key !== "Enter" || !addCol.value.trim()) return;
      if (!state.cols.includes(addCol.value.trim())) state.cols.push(addCol.value.trim());
      addCol.value = "";
      saveCols(); load();
    } });
  // The filter is read by the server (phalanx.store.filters, the grammar of where= and `phalanx ls
  // --where`): conditions joined by "and"; what it cannot read comes back as a 400 shown here.
  const where = h("input", { type: "text", placeholder: "filter, e.g. param:optimizer=adam and metric:max:acc>=0.9",
    value: state.where, size: 44, "aria-label": "column filter",
    onkeydown: (ev) => { if (ev.key === "Enter") { state.offset = 0; load(); } } });
  const whereError = h("span", { class: "filter-error", id: "filter-error", role: "alert", hidden: true });
  function showFilterError(message) {
    whereError.hidden = !message;
    whereError.textContent = message || "";
    if (message) where.setAttribute("aria-invalid", "true"); else where.removeAttribute("aria-invalid");
  }
  function saveCols() { localStorage.setItem("phalanx.columns", JSON.stringify(state.cols)); }
  api.columns().then((c) => {
    add(choices, c.params.map((k) => h("option", { value: `param:${k}` })),
      c.metrics.flatMap((t) => ["last", "min", "max"].map((a) => h("option", { value: `metric:${a}:${t}` }))));
  }).catch(() => {});
  const thead = h("thead");
  const tbody = h("tbody");
  const pager = h("div", { class: "pager" });

  let debounce = null;
  const refilter = () => { clearTimeout(debounce); debounce = setTimeout(() => { state.offset = 0; load(); }, 250); };
  for (const input of [q, project, tag]) input.addEventListener("input", refilter);
  status.addEventListener("change", () => { state.offset = 0; load(); });

  add(clear(root), 
    h("div", { class: "toolbar" }, h("h1", { style: { marginRight: "12px" } }, "Experiments"), q, status, project, tag,
      h("span", { class: "spacer" }), counter, exportCsv, compare),
    h("div", { class: "toolbar" }, addCol, choices, where, whereError),
    h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "experiments" }, thead, tbody)),
    pager,
  );

  function sortKey() { return state.sort.replace(/^-/, ""); }
  function extraHead(key) {
    const active = sortKey() === key;
    const arrow = active ? (state.sort.startsWith("-") ? "▼" : "▲") : "";
    return h("th", { class: "sortable extra", "data-column": key, onclick: () => {
      state.sort = active && state.sort.startsWith("-") ? key : `-${key}`;
      state.offset = 0;
      load();
    } }, key.replace(/^param:/, "").replace(/^metric:(\w+):(.*)$/, "$2 ($1)"), h("span", { class: "arrow" }, arrow),
    h("button", { class: "link small", title: "remove this column", "aria-label": `remove column ${key}`, onclick: (ev) => {
      ev.stopPropagation();
      state.cols = state.cols.filter((c) => c !== key);
      if (sortKey() === key) state.sort = "-created_at";
      saveCols(); load();
    } }, "×"));
  }

  function drawHead() {
    add(clear(thead), h("tr", {}, COLUMNS.map(([label, key]) => {
      if (!key) return h("th", {}, label);
      const active = sortKey() === key;
      const arrow = active ? (state.sort.startsWith("-") ? "▼" : "▲") : "";
      return h("th", { class: "sortable", onclick: () => {
        state.sort = active && !state.sort.startsWith("-") ? `-${key}` : (active ? key : (key === "name" || key === "project" ? key : `-${key}`));
        state.offset = 0;
        load();
      } }, label, h("span", { class: "arrow" }, arrow));
    }), state.cols.map(extraHead)));
  }

  function drawBody() {
    clear(tbody);
    if (!items.length) {
      add(tbody, h("tr", {}, h("td", { colspan: COLUMNS.length, class: "empty" },
        state.q || state.status || state.project || state.tag ? "No experiment matches these filters." :
          "No experiments yet. Run one with: phalanx run -f polyaxonfile.yml")));
      return;
    }
    for (const e of items) {
      const box = h("input", { type: "checkbox", "aria-label": `select ${e.id}`, onchange: (ev) => {
        if (ev.target.checked) state.selected.add(e.id); else state.selected.delete(e.id);
        updateCompare();
      } });
      box.checked = state.selected.has(e.id);
      const link = `/experiments/${e.id}`;
      add(tbody, h("tr", { "data-id": e.id },
        h("td", {}, box),
        h("td", { class: "mono" }, h("a", { href: link }, e.id)),
        h("td", {}, h("a", { href: link }, e.name),
          // a `phalanx serve` session: its scalars are requests and latency, not training curves
          e.kind && e.kind !== "training" ? h("span", { class: "tag", "data-kind": e.kind }, e.kind) : null),
        h("td", {}, e.project),
        h("td", { title: e.reason || null }, badge(e.status)),
        h("td", {}, e.framework || "—"),
        h("td", { class: "topology" }, topologyText(e.topology)),
        h("td", { class: "num", title: fmtTime(e.started_at || e.created_at) }, fmtAgo(e.started_at || e.created_at)),
        h("td", { class: "num" }, fmtDuration(durationSeconds(e))),
        h("td", {}, (e.tags || []).map((t) => h("span", { class: "tag" }, t))),
        groupCell(e),
        state.cols.map((c) => {
          const v = e.columns && c in e.columns ? e.columns[c] : undefined;
          // 5 significant digits on screen, the full value on hover (and in the CSV export)
          return h("td", { class: "num", "data-column": c, title: v === undefined ? null : fmtValue(v) },
            v === undefined ? "—" : fmtShort(v));
        }),
      ));
    }
  }

  function updateCompare() {
    compare.disabled = state.selected.size < 2;
    compare.textContent = state.selected.size ? `Compare (${state.selected.size})` : "Compare";
  }

  function drawPager(total) {
    clear(pager);
    if (total <= PAGE) return;
    const last = state.offset + items.length;
    add(pager, 
      h("span", { class: "muted" }, `${state.offset + 1}–${last} of ${total}`),
      h("button", { disabled: state.offset === 0, onclick: () => { state.offset = Math.max(0, state.offset - PAGE); load(); } }, "Previous"),
      h("button", { disabled: last >= total, onclick: () => { state.offset += PAGE; load(); } }, "Next"),
    );
  }

  let loads = 0; // an answer to an older request (another sort, filter, page) must not overwrite a newer one
  async function load() {
    clearTimeout(timer);
    const ticket = ++loads;
    const query = { offset: state.offset, limit: PAGE, sort: SERVER_SORTS.has(sortKey()) ? state.sort : "-created_at" };
    if (isExtra(sortKey())) query.order = state.sort;
    if (state.cols.length) query.column = state.cols;
    state.where = where.value.trim();
    if (state.where) query.where = state.where;
    state.q = q.value.trim(); state.status = status.value; state.project = project.value.trim(); state.tag = tag.value.trim();
    for (const k of ["q", "status", "project", "tag"]) if (state[k]) query[k] = state[k];
    const shown = new URLSearchParams();
    for (const k of ["q", "status", "project", "tag", "sort", "where"]) if (state[k] && !(k === "sort" && state[k] === "-created_at")) shown.set(k, state[k]);
    for (const c of state.cols) shown.append("col", c);
    history.replaceState(null, "", shown.toString() ? `/?${shown}` : "/");
    const all = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (k !== "offset" && k !== "limit") for (const x of [v].flat()) all.append(k, x);
    exportCsv.href = `/api/v1/experiments.csv?${all}`;
    try {
      const page = await api.experiments(query);
      if (ticket !== loads) return;
      await nameGroups(page.items);
      if (ticket !== loads) return;
      items = page.items;
      showFilterError(null);
      counter.textContent = `${page.total} experiment${page.total === 1 ? "" : "s"}`;
      drawHead(); drawBody(); drawPager(page.total); updateCompare();
      // Quick while anything runs; slower otherwise, so experiments started later still show up.
      const live = items.some((e) => ["running", "starting", "created", "queued"].includes(e.status));
      if (ctx.alive()) timer = setTimeout(refresh, live ? 3000 : 10000);
    } catch (err) {
      if (ticket !== loads) return;
      // A filter the server cannot read: say why next to the box and keep the rows on screen.
      if (err.status === 400 && state.where) { showFilterError(err.message); return; }
      add(clear(tbody), h("tr", {}, h("td", { colspan: COLUMNS.length, class: "empty" }, `Could not load: ${err.message}`)));
      if (ctx.alive()) timer = setTimeout(refresh, 10000);
    }
  }

  function refresh() {
    if (document.hidden) { timer = setTimeout(refresh, 3000); return; }
    load();
  }

  drawHead();
  load();
  return () => clearTimeout(timer);
}
