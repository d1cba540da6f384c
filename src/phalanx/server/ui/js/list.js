// Experiments: a sortable, filterable table, refreshed every few seconds while any experiment runs.

import { api } from "./api.js";
import { badge, clear, durationSeconds, fmtAgo, fmtDuration, fmtShort, fmtTime, fmtValue, h, topologyText, add } from "./util.js";

// Every column sorts on the server, over all pages (duration and topology are computed there).
const SERVER_SORTS = new Set(["created_at", "started_at", "name", "project", "status", "id", "framework",
  "topology", "duration", "group_id"]);
// The built-in columns: [key, label, sort field or null]. Each can be hidden and every column moved
// (the "Columns" menu and the ‹ › in a header); the layout is in the address (hide=, arrange=), so a
// reload or a shared link shows the same table.
const BUILTIN = [
  ["id", "id", "id"], ["name", "name", "name"], ["project", "project", "project"], ["status", "status", "status"],
  ["framework", "framework", "framework"], ["topology", "topology", "topology"], ["started", "started", "started_at"],
  ["duration", "duration", "duration"], ["tags", "tags", null], ["group", "group", "group_id"],
];
const BUILTIN_KEYS = BUILTIN.map(([k]) => k);
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
    hidden: new Set(params.getAll("hide").filter((k) => BUILTIN_KEYS.includes(k))),
    arrange: params.getAll("arrange"), // every column's key in the order shown (empty: the default)
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
  // Sweep analysis (parallel coordinates, scatter, importance) of the ticked runs, or of every run
  // the filters keep when none is ticked.
  const analyse = h("button", { id: "analyse", onclick: () => {
    const q = new URLSearchParams();
    if (state.selected.size >= 2) q.set("ids", [...state.selected].join(","));
    else for (const k of ["q", "status", "project", "tag", "where"]) if (state[k]) q.set(k, state[k]);
    const metric = state.cols.find((c) => c.startsWith("metric:"));
    if (metric) q.set("metric", metric);
    location.href = `/sweep?${q}`;
  } }, "Analyse");
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
  const columnsMenu = h("details", { class: "columns-menu", id: "columns-menu" });
  const thead = h("thead");
  const tbody = h("tbody");
  const pager = h("div", { class: "pager" });

  let debounce = null;
  const refilter = () => { clearTimeout(debounce); debounce = setTimeout(() => { state.offset = 0; load(); }, 250); };
  for (const input of [q, project, tag]) input.addEventListener("input", refilter);
  status.addEventListener("change", () => { state.offset = 0; load(); });

  add(clear(root), 
    h("div", { class: "toolbar" }, h("h1", { style: { marginRight: "12px" } }, "Experiments"), q, status, project, tag,
      h("span", { class: "spacer" }), counter, exportCsv, analyse, compare),
    h("div", { class: "toolbar" }, columnsMenu, addCol, choices, where, whereError),
    h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "experiments" }, thead, tbody)),
    pager,
  );

  function sortKey() { return state.sort.replace(/^-/, ""); }
  // the columns shown, in order: built-in keys and extra columns (param:…, metric:…)
  function layout() {
    const all = [...BUILTIN_KEYS, ...state.cols];
    const pos = (k) => { const i = state.arrange.indexOf(k); return i < 0 ? state.arrange.length + all.indexOf(k) : i; };
    return all.filter((k) => !state.hidden.has(k)).sort((a, b) => pos(a) - pos(b));
  }
  function move(key, by) {
    const keys = layout();
    const i = keys.indexOf(key), j = i + by;
    if (i < 0 || j < 0 || j >= keys.length) return;
    [keys[i], keys[j]] = [keys[j], keys[i]];
    state.arrange = [...keys, ...[...state.hidden]]; // hidden ones keep a place for when they come back
    drawHead(); drawBody(); address();
  }
  const moveButtons = (key) => h("span", { class: "move" },
    // the arrows are drawn by CSS (::before): the header's text stays the column's name
    h("button", { class: "link small move-left", title: "move left", "aria-label": `move ${key} left`, onclick: (ev) => { ev.stopPropagation(); move(key, -1); } }),
    h("button", { class: "link small move-right", title: "move right", "aria-label": `move ${key} right`, onclick: (ev) => { ev.stopPropagation(); move(key, 1); } }));
  function drawColumnsMenu() {
    add(clear(columnsMenu), h("summary", {}, "Columns"), h("div", { class: "columns-list" }, BUILTIN.map(([key, label]) => {
      const box = h("input", { type: "checkbox", "data-column": key, "aria-label": `show ${label}`, onchange: () => {
        if (box.checked) state.hidden.delete(key); else state.hidden.add(key);
        drawHead(); drawBody(); address();
      } });
      box.checked = !state.hidden.has(key);
      return h("label", {}, box, ` ${label}`);
    })));
  }
  function extraHead(key) {
    const active = sortKey() === key;
    const arrow = active ? (state.sort.startsWith("-") ? "▼" : "▲") : "";
    return h("th", { class: "sortable extra", "data-column": key, onclick: () => {
      state.sort = active && state.sort.startsWith("-") ? key : `-${key}`;
      state.offset = 0;
      load();
    } }, key.replace(/^param:/, "").replace(/^metric:(\w+):(.*)$/, "$2 ($1)"), h("span", { class: "arrow" }, arrow), moveButtons(key),
    h("button", { class: "link small", title: "remove this column", "aria-label": `remove column ${key}`, onclick: (ev) => {
      ev.stopPropagation();
      state.cols = state.cols.filter((c) => c !== key);
      if (sortKey() === key) state.sort = "-created_at";
      saveCols(); load();
    } }, "×"));
  }

  function drawHead() {
    const builtin = new Map(BUILTIN.map((c) => [c[0], c]));
    add(clear(thead), h("tr", {}, h("th", {}), layout().map((k) => {
      if (!builtin.has(k)) return extraHead(k);
      const [, label, key] = builtin.get(k);
      if (!key) return h("th", { "data-column": k }, label, moveButtons(k));
      const active = sortKey() === key;
      const arrow = active ? (state.sort.startsWith("-") ? "▼" : "▲") : "";
      return h("th", { class: "sortable", "data-column": k, onclick: () => {
        state.sort = active && !state.sort.startsWith("-") ? `-${key}` : (active ? key : (key === "name" || key === "project" ? key : `-${key}`));
        state.offset = 0;
        load();
      } }, label, h("span", { class: "arrow" }, arrow), moveButtons(k));
    })));
  }

  function drawBody() {
    clear(tbody);
    if (!items.length) {
      add(tbody, h("tr", {}, h("td", { colspan: layout().length + 1, class: "empty" },
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
      const cells = {
        id: () => h("td", { class: "mono" }, h("a", { href: link }, e.id)),
        name: () => h("td", {}, h("a", { href: link }, e.name),
          // a `phalanx serve` session: its scalars are requests and latency, not training curves
          e.kind && e.kind !== "training" ? h("span", { class: "tag", "data-kind": e.kind }, e.kind) : null),
        project: () => h("td", {}, e.project),
        status: () => h("td", { title: e.reason || null }, badge(e.status)),
        framework: () => h("td", {}, e.framework || "—"),
        topology: () => h("td", { class: "topology" }, topologyText(e.topology)),
        started: () => h("td", { class: "num", title: fmtTime(e.started_at || e.created_at) }, fmtAgo(e.started_at || e.created_at)),
        duration: () => h("td", { class: "num" }, fmtDuration(durationSeconds(e))),
        tags: () => h("td", {}, (e.tags || []).map((t) => h("span", { class: "tag" }, t))),
        group: () => groupCell(e),
      };
      add(tbody, h("tr", { "data-id": e.id }, h("td", {}, box), layout().map((c) => {
        if (cells[c]) return cells[c]();
        const v = e.columns && c in e.columns ? e.columns[c] : undefined;
        // 5 significant digits on screen, the full value on hover (and in the CSV export)
        return h("td", { class: "num", "data-column": c, title: v === undefined ? null : fmtValue(v) },
          v === undefined ? "—" : fmtShort(v));
      })));
    }
  }

  function updateCompare() {
    analyse.textContent = state.selected.size >= 2 ? `Analyse (${state.selected.size})` : "Analyse";
    analyse.title = state.selected.size >= 2 ? "sweep analysis of the ticked runs" : "sweep analysis of every run the filters keep";
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

  function address() {
    const shown = new URLSearchParams();
    for (const k of ["q", "status", "project", "tag", "sort", "where"]) if (state[k] && !(k === "sort" && state[k] === "-created_at")) shown.set(k, state[k]);
    for (const c of state.cols) shown.append("col", c);
    for (const k of BUILTIN_KEYS) if (state.hidden.has(k)) shown.append("hide", k);
    const all = [...BUILTIN_KEYS, ...state.cols];
    state.arrange = state.arrange.filter((k) => all.includes(k));
    for (const k of state.arrange) shown.append("arrange", k);
    history.replaceState(null, "", shown.toString() ? `/?${shown}` : "/");
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
    address();
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
      add(clear(tbody), h("tr", {}, h("td", { colspan: layout().length + 1, class: "empty" }, `Could not load: ${err.message}`)));
      if (ctx.alive()) timer = setTimeout(refresh, 10000);
    }
  }

  function refresh() {
    if (document.hidden) { timer = setTimeout(refresh, 3000); return; }
    load();
  }

  drawColumnsMenu();
  drawHead();
  load();
  return () => clearTimeout(timer);
}
