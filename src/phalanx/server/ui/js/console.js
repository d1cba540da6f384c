// The Console tab: every replica's output (or one replica's), searchable, following a running
// experiment live through server-sent events.

import { ansiRuns, collapseCR, stripAnsi } from "./ansi.js";
import { api } from "./api.js";
import { byReplica, clear, color, plural, h, add } from "./util.js";

// Lines kept on screen (a browser tab slows down past a few hundred thousand); older ones are counted
// and announced, and the whole log is one click away (logs.txt). The user picks the cap.
const CAPS = [10000, 50000, 200000, 1000000];
function lineCap() {
  const v = Number(localStorage.getItem("phalanx.consoleLines"));
  return CAPS.includes(v) ? v : 50000;
}

export function renderConsole(panel, ctx, exp) {
  let source = null;
  let replica = "";
  let lines = [];
  const seen = new Set((exp.replicas || []).map((r) => r.name));
  const chips = h("div", { class: "chips", id: "replica-chips" });
  const search = h("input", { type: "search", placeholder: "Search the console", "aria-label": "search console" });
  const follow = h("input", { type: "checkbox", id: "follow", checked: true });
  const state = h("span", { class: "muted small", id: "console-state" });
  const out = h("div", { class: "console", id: "console" });
  let cap = lineCap();
  let dropped = 0;
  const capSelect = h("select", { "aria-label": "lines kept", id: "console-cap", title: "lines kept on screen",
    onchange: () => { cap = Number(capSelect.value); localStorage.setItem("phalanx.consoleLines", String(cap)); open(); } },
    CAPS.map((c) => h("option", { value: String(c) }, `last ${c.toLocaleString()} lines`)));
  capSelect.value = String(cap);
  const download = h("a", { href: api.logsTextUrl(exp.id, {}), download: "", class: "small" }, "download all");
  const droppedNote = h("div", { class: "alert warn", id: "console-dropped", hidden: true });
  add(panel,
    h("div", { class: "toolbar" }, chips, h("span", { class: "spacer" }), search, follow, h("label", { for: "follow" }, "follow"),
      capSelect, download, state),
    droppedNote,
    out,
  );
  function showDropped() {
    droppedNote.hidden = dropped === 0;
    if (!dropped) return;
    const what = dropped < 0 ? "Earlier lines are" : `${dropped.toLocaleString()} earlier line${dropped === 1 ? " is" : "s are"}`;
    add(clear(droppedNote), `${what} not shown: this view keeps the last ${cap.toLocaleString()}. `,
      h("a", { href: api.logsTextUrl(exp.id, replica ? { replica } : {}), download: "" }, "Download the whole log"),
      " or keep more lines (the menu above).");
  }
  const colors = new Map();
  const colorOf = (name) => {
    if (!colors.has(name)) colors.set(name, color([...seen].sort(byReplica).indexOf(name) + 1));
    return colors.get(name);
  };

  function drawChips() {
    const names = [...seen].sort(byReplica);
    add(clear(chips), h("button", { class: `chip ${replica === "" ? "active" : ""}`, "data-replica": "", onclick: () => select("") }, "all replicas"),
      names.map((n) => h("button", { class: `chip ${replica === n ? "active" : ""}`, "data-replica": n, onclick: () => select(n) }, n)));
  }

  function lineEl(l, needle) {
    const text = h("span", { class: "text" });
    const shown = collapseCR(l.text);
    if (needle) {
      const plain = stripAnsi(shown);
      const lower = plain.toLowerCase();
      let at = 0;
      for (let i = lower.indexOf(needle); i >= 0; i = lower.indexOf(needle, at)) {
        add(text, plain.slice(at, i), h("mark", {}, plain.slice(i, i + needle.length)));
        at = i + needle.length;
      }
      add(text, plain.slice(at));
    } else if (shown.includes("\x1b")) {
      for (const run of ansiRuns(shown)) add(text, run.cls ? h("span", { class: run.cls }, run.text) : run.text);
    } else text.textContent = shown;
    const err = l.stream === "stderr";
    return h("div", { class: `line ${l.stream}`, "data-replica": l.replica, "data-stream": l.stream },
      h("span", { class: "rep", style: { color: colorOf(l.replica) } }, `[${l.replica}]`),
      err ? h("span", { class: "err-mark", title: "written to stderr" }, "err") : null, text);
  }

  function matches(l, needle) { return !needle || stripAnsi(collapseCR(l.text)).toLowerCase().includes(needle); }

  // "live", "N lines", or while searching "k of N lines" (and a line saying so when none match).
  let ended = false;
  let matched = 0;
  function showCount() {
    const needle = search.value.trim();
    if (needle) state.textContent = `${matched.toLocaleString()} of ${plural(lines.length, "line")}`;
    else if (ended) state.textContent = plural(lines.length, "line");
    else state.textContent = ctx.live() && source && source.readyState === EventSource.OPEN ? "live" : "";
    const none = out.querySelector(".no-match");
    if (needle && !matched && lines.length) {
      if (!none) add(out, h("div", { class: "line muted no-match" }, `No line matches “${needle}”.`));
      else none.textContent = `No line matches “${needle}”.`;
    } else if (none) none.remove();
  }

  function redraw() {
    const needle = search.value.trim().toLowerCase();
    clear(out);
    matched = 0;
    const frag = document.createDocumentFragment();
    for (const l of lines) if (matches(l, needle)) { matched++; add(frag, lineEl(l, needle)); }
    add(out, frag);
    showCount();
    if (follow.checked) out.scrollTop = out.scrollHeight;
  }

  let pending = [];
  let scheduled = false;
  function append(l) {
    lines.push(l);
    if (!seen.has(l.replica)) { seen.add(l.replica); drawChips(); }
    pending.push(l);
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(() => {
        scheduled = false;
        const needle = search.value.trim().toLowerCase();
        const frag = document.createDocumentFragment();
        for (const p of pending) if (matches(p, needle)) { matched++; add(frag, lineEl(p, needle)); }
        pending = [];
        out.querySelector(".no-match")?.remove();
        add(out, frag);
        if (lines.length > cap) { dropped += lines.length - cap; lines = lines.slice(-cap); redraw(); showDropped(); }
        else if (needle || ended) showCount();
        if (follow.checked) out.scrollTop = out.scrollHeight;
      });
    }
  }

  // A finished experiment's console opens at its tail: the first request asks for the last lines
  // (from_end), which are drawn at once; earlier pages are then read backwards and put above them,
  // up to the lines kept. (Streaming it from the first line took 68 s to reach the end of 60,000.)
  const FIRST_PAGE = 1000; // a screenful and then some, drawn at once
  const BACK_PAGE = 10000;
  let opened = 0;
  async function openFinished(ticket) {
    const params = replica ? { replica } : {};
    let fromEnd = 0;
    let more = false;
    try {
      for (;;) {
        const want = Math.min(fromEnd ? BACK_PAGE : FIRST_PAGE, cap - lines.length);
        if (want <= 0) {
          more = (await api.logs(exp.id, { ...params, from_end: true, offset: fromEnd, limit: 1 })).lines.length > 0;
          break;
        }
        const page = await api.logs(exp.id, { ...params, from_end: true, offset: fromEnd, limit: want });
        if (ticket !== opened) return;
        prepend(page.lines);
        fromEnd = page.next_offset;
        if (page.lines.length < want) break; // the first line is in view
      }
    } catch (err) {
      if (ticket !== opened) return;
      state.textContent = `could not load: ${err.message}`;
      return;
    }
    if (ticket !== opened) return;
    dropped = more ? -1 : 0;
    showDropped();
    ended = true;
    out.dataset.loaded = "true";
    showCount();
    if (!lines.length) add(out, h("div", { class: "line muted" }, "No console output recorded."));
  }

  // Older lines go above the ones shown; the view stays where the reader is (at the bottom when
  // following).
  function prepend(batch) {
    if (!batch.length) return;
    lines = batch.concat(lines);
    let fresh = false;
    for (const l of batch) if (!seen.has(l.replica)) { seen.add(l.replica); fresh = true; }
    if (fresh) drawChips();
    const needle = search.value.trim().toLowerCase();
    const frag = document.createDocumentFragment();
    for (const l of batch) if (matches(l, needle)) { matched++; add(frag, lineEl(l, needle)); }
    const below = out.scrollHeight - out.scrollTop;
    out.prepend(frag);
    if (follow.checked) out.scrollTop = out.scrollHeight;
    else out.scrollTop = out.scrollHeight - below;
    showCount();
  }

  function open() {
    if (source) source.close();
    source = null;
    const ticket = ++opened;
    delete out.dataset.loaded;
    lines = [];
    pending = [];
    matched = 0;
    dropped = 0;
    showDropped();
    ended = false;
    clear(out);
    state.textContent = "loading…";
    if (!ctx.live()) { openFinished(ticket); return; }
    const params = replica ? { replica } : {};
    source = new EventSource(api.logStreamUrl(exp.id, params), { withCredentials: true });
    source.addEventListener("line", (ev) => append(JSON.parse(ev.data)));
    source.addEventListener("open", () => { state.textContent = ctx.live() ? "live" : ""; });
    source.addEventListener("end", () => {
      source.close();
      ended = true;
      showCount();
      if (!lines.length) add(out, h("div", { class: "line muted" }, "No console output recorded."));
    });
    // The badge follows the connection: "live" only while the stream is open.
    source.addEventListener("error", () => {
      state.textContent = source.readyState === EventSource.CLOSED ? "disconnected" : "reconnecting…";
    });
  }

  function select(name) { replica = name; drawChips(); open(); }

  // Scrolling up to read stops following; scrolling back to the bottom follows again.
  out.addEventListener("scroll", () => {
    const atBottom = out.scrollHeight - out.scrollTop - out.clientHeight < 24;
    if (follow.checked !== atBottom) follow.checked = atBottom;
  });
  follow.addEventListener("change", () => { if (follow.checked) out.scrollTop = out.scrollHeight; });

  let debounce = null;
  search.addEventListener("input", () => { clearTimeout(debounce); debounce = setTimeout(redraw, 150); });
  drawChips();
  open();
  return () => { if (source) source.close(); };
}
