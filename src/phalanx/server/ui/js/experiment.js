// The experiment page: a header and seven tabs. The tab is in the URL's hash (#scalars), so a link can
// open any of them. The header and Overview refresh while the experiment runs.

import { api } from "./api.js";
import { renderConsole } from "./console.js";
import { renderArtifacts, renderModels, renderParams, renderScalars } from "./panels.js";
import { inputsCard } from "./datasets.js";
import { rerunForm } from "./rerun.js";
import { may, whoAmI } from "./roles.js";
import { renderSamples } from "./samples.js";
import { sourceDetails } from "./repro.js";
import { tensorboardButton } from "./services.js";
import { badge, byReplica, clear, plural, durationSeconds, fmtBytes, fmtDuration, fmtResources, fmtTime, fmtValue, h, topologyText, add } from "./util.js";

const TABS = [
  ["overview", "Overview"], ["scalars", "Scalars"], ["hyperparameters", "Hyperparameters"],
  ["samples", "Debug samples"], ["artifacts", "Artifacts"], ["models", "Models"], ["console", "Console"],
];

export function renderExperiment(root, ctx, id) {
  let exp = null;
  let me = { admin: true, projects: {} }; // who is looking (/api/v1/me): actions follow their role
  let tab = (location.hash || "#overview").slice(1);
  if (!TABS.some(([k]) => k === tab)) tab = "overview";
  let disposePanel = () => {};
  let timer = null;

  const head = h("div", { class: "exp-head" });
  const rerunBox = h("div", { id: "rerun-box" });
  const tabs = h("nav", { class: "tabs", role: "tablist" });
  const panel = h("section", { id: "panel" });
  add(clear(root), head, rerunBox, tabs, panel);

  function drawTabs() {
    add(clear(tabs), TABS.map(([key, label]) => h("a", {
      href: `#${key}`, role: "tab", class: key === tab ? "active" : "", "data-tab": key,
      "aria-selected": key === tab ? "true" : "false",
      onclick: (ev) => { ev.preventDefault(); if (key !== tab) { tab = key; history.replaceState(null, "", `#${key}`); drawTabs(); drawPanel(); } },
    }, label)));
  }

  function drawHead() {
    const running = ["running", "starting", "created", "queued", "pending"].includes(exp.status);
    const stop = h("button", { class: "danger", onclick: async () => {
      if (!confirm(`Stop experiment ${exp.id}? Every replica will be stopped.`)) return;
      try { const r = await api.stop(exp.id); stop.disabled = true; stop.textContent = "Stopping…"; console.info(r.message); refresh(); }
      catch (err) { alert(`Could not stop: ${err.message}`); }
    } }, "Stop");
    const del = h("button", { class: "danger", onclick: async () => {
      if (!confirm(`Delete experiment ${exp.id} and everything it reported? This cannot be undone.`)) return;
      try { await api.remove(exp.id); location.href = "/"; } catch (err) { alert(`Could not delete: ${err.message}`); }
    } }, "Delete");
    const origin = ((exp.plan || {}).launch || {}).rerun_of;
    // a started experiment with its file can run again (the server answers if its snapshot is gone)
    const editor = may(me, exp.project, "editor");
    const again = editor && exp.spec_text && exp.backend !== "script"
      ? h("button", { id: "run-again", onclick: () => {
        if (rerunBox.firstChild) { clear(rerunBox); return; }
        add(rerunBox, rerunForm(exp, () => clear(rerunBox)));
      } }, "Run again with…") : null;
    add(clear(head),
      h("div", { style: { flex: "1" } },
        h("div", { class: "muted small" }, h("a", { href: "/" }, "Experiments"), " / ", exp.project),
        h("h1", {}, exp.name, " ", badge(exp.status),
          exp.status === "pending" && exp.reason ? h("span", { class: "muted small", "data-pending-reason": "" }, ` (${exp.reason})`) : null),
        h("div", { class: "meta" },
          h("span", {}, "id ", h("b", { class: "mono" }, exp.id)),
          h("span", { "data-kind": exp.kind || "training" }, "kind ", h("b", {}, exp.kind || "training")),
          h("span", {}, "framework ", h("b", {}, exp.framework || "—")),
          h("span", {}, "topology ", h("b", {}, topologyText(exp.topology))),
          exp.backend ? h("span", {}, "backend ", h("b", {}, exp.backend)) : null,
          exp.cluster ? h("span", {}, "cluster ", h("b", {}, exp.cluster)) : null,
          origin ? h("span", { id: "rerun-of", "data-origin": origin }, "rerun of ",
            h("a", { href: `/experiments/${encodeURIComponent(origin)}`, class: "mono" }, origin)) : null,
          exp.group_id ? h("span", { "data-group": exp.group_id }, "group ",
            h("a", { href: `/groups/${encodeURIComponent(exp.group_id)}`, class: "mono" }, exp.group_id)) : null,
          h("span", {}, "started ", h("b", {}, fmtTime(exp.started_at || exp.created_at))),
          h("span", {}, "duration ", h("b", {}, fmtDuration(durationSeconds(exp)))),
          (exp.tags || []).length ? h("span", {}, exp.tags.map((t) => h("span", { class: "tag" }, t))) : null,
        )),
      h("div", { class: "toolbar" },
        h("a", { href: `/compare?ids=${exp.id}` }, h("button", {}, "Compare with…")),
        tensorboardButton({ experiment: exp.id }),
        again, running ? (editor ? stop : null) : (may(me, exp.project, "admin") ? del : null)),
    );
  }

  function drawPanel() {
    disposePanel();
    disposePanel = () => {};
    clear(panel);
    const live = () => ctx.alive() && exp && ["running", "starting", "created", "queued", "pending"].includes(exp.status);
    const pctx = { alive: ctx.alive, live, experiment: () => exp };
    const result = {
      overview: () => { renderOverview(panel, exp); add(panel, inputsCard(exp)); renderRun(panel, exp); renderNotes(panel, exp, may(me, exp.project, "editor"), (e) => { exp = { ...exp, ...e }; drawHead(); }); },
      scalars: () => renderScalars(panel, pctx, exp.id),
      hyperparameters: () => renderParams(panel, exp.id),
      samples: () => renderSamples(panel, pctx, exp.id),
      artifacts: () => renderArtifacts(panel, exp.id),
      models: () => renderModels(panel, exp.id),
      console: () => renderConsole(panel, pctx, exp),
    }[tab]();
    if (typeof result === "function") disposePanel = result;
  }

  async function refresh() {
    clearTimeout(timer);
    try {
      exp = await api.experiment(id);
      drawHead();
      // the Overview is redrawn with the new state, unless the user is typing in it (notes, tags)
      if (tab === "overview" && !panel.contains(document.activeElement)) drawPanel();
      if (["running", "starting", "created", "queued", "pending"].includes(exp.status) && ctx.alive()) timer = setTimeout(refresh, 3000);
    } catch (err) {
      add(clear(root), h("div", { class: "empty" }, err.status === 404 ? `No experiment ${id} (it may have been deleted). ` : `Could not load: ${err.message}. `, h("a", { href: "/" }, "All experiments")));
    }
  }

  const onHash = () => {
    const want = (location.hash || "#overview").slice(1);
    if (exp && want !== tab && TABS.some(([k]) => k === want)) { tab = want; drawTabs(); drawPanel(); }
  };
  window.addEventListener("hashchange", onHash);

  (async () => {
    try { [exp, me] = await Promise.all([api.experiment(id), whoAmI()]); } catch (err) {
      add(clear(root), h("div", { class: "empty" }, err.status === 404 ? `No experiment ${id} (it may have been deleted). ` : `Could not load: ${err.message}. `, h("a", { href: "/" }, "All experiments")));
      return;
    }
    drawHead(); drawTabs(); drawPanel();
    if (["running", "starting", "created", "queued", "pending"].includes(exp.status)) timer = setTimeout(refresh, 3000);
  })();

  return () => { clearTimeout(timer); disposePanel(); window.removeEventListener("hashchange", onHash); };
}

function renderOverview(panel, exp) {
  const plan = exp.plan || {};
  const command = Array.isArray(plan.command) ? plan.command.join(" ") : plan.command;
  const params = Object.entries(plan.params || {});
  const replicas = [...(exp.replicas || [])].sort((a, b) => byReplica(a.name, b.name));
  const roles = [["master", "Master"], ["worker", "Workers"], ["ps", "PS"]];
  const topo = h("div", { class: "topology", id: "topology" });
  for (const [role, label] of roles) {
    const group = replicas.filter((r) => r.role === role);
    if (!group.length) continue;
    add(topo, h("div", { class: "role-row", "data-role": role }, h("div", { class: "role-label" }, label), h("div", { class: "role-boxes" }, group.map(replicaBox))));
  }
  const other = replicas.filter((r) => !roles.some(([k]) => k === r.role));
  if (other.length) add(topo, h("div", { class: "role-row" }, h("div", { class: "role-label" }, "other"), h("div", { class: "role-boxes" }, other.map(replicaBox))));
  if (!replicas.length) add(topo, h("p", { class: "muted" }, "No replicas recorded (a script run without phalanx run)."));
  add(panel, 
    exp.reason ? h("div", { class: `alert ${exp.status === "failed" ? "bad" : "warn"}`, id: "failure-reason" }, h("b", {}, `${exp.status === "failed" ? "Failed" : "Reason"}: `), exp.reason) : null,
    h("div", { class: "overview" },
      h("div", { class: "card" }, h("h2", { style: { marginTop: 0 } }, "Topology ", h("span", { class: "muted small" }, topologyText(exp.topology))), topo,
        command ? [h("h3", {}, "Command"), h("pre", { class: "file", id: "command" }, command)] : null,
        params.length ? [h("h3", {}, "Parameters"), h("div", { class: "mono small", id: "run-params" },
          params.map(([k, v]) => h("span", { class: "tag" }, `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`)))] : null),
      h("div", { class: "card" }, h("h2", { style: { marginTop: 0 } }, "Experiment file"),
        exp.spec_text ? h("pre", { class: "file", id: "spec-text" }, exp.spec_text) : h("p", { class: "muted" }, "No experiment file (started from a script or the Python API)."))),
  );
}

const SIGNALS = { 1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM" };

// Negative exit codes are signals (as Python's subprocess reports them).
function exitText(code) {
  if (code === null || code === undefined) return "—";
  return code < 0 ? `${code} (${SIGNALS[-code] || `signal ${-code}`})` : String(code);
}

function replicaBox(r) {
  const res = fmtResources(r.resources);
  return h("div", { class: `replica ${r.state}`, "data-replica": r.name },
    h("div", { class: "rname" }, h("span", {}, r.name), badge(r.state)),
    h("dl", {},
      r.rank !== null && r.rank !== undefined ? [h("dt", {}, "rank"), h("dd", {}, r.rank)] : null,
      h("dt", {}, "host"), h("dd", {}, r.host || "—"),
      r.pid ? [h("dt", {}, "pid"), h("dd", {}, r.pid)] : null,
      h("dt", {}, "exit"), h("dd", {}, exitText(r.exit_code)),
      res ? [h("dt", {}, "resources"), h("dd", {}, res)] : null,
    ),
    r.reason ? h("div", { class: "reason" }, r.reason) : null,
  );
}

// Tags and notes the user keeps on the experiment (saved with PATCH), and what its scripts
// reported as text (report_text).
// Only an editor of its project may change them: anyone else reads them.
function renderNotes(panel, exp, editable, saved) {
  const tags = h("input", { type: "text", id: "edit-tags", value: (exp.tags || []).join(", "), "aria-label": "tags",
    placeholder: "tags, comma-separated", style: { width: "100%" }, readonly: !editable });
  const notes = h("textarea", { id: "edit-notes", rows: "4", "aria-label": "notes", placeholder: "Notes about this experiment",
    style: { width: "100%" }, readonly: !editable });
  notes.value = exp.notes || "";
  const state = h("span", { class: "muted small", id: "notes-state" });
  const save = h("button", { class: "primary", id: "save-notes", onclick: async () => {
    save.disabled = true;
    try {
      const e = await api.annotate(exp.id, { tags: tags.value.split(",").map((t) => t.trim()).filter(Boolean), notes: notes.value });
      state.textContent = "Saved.";
      saved(e);
    } catch (err) { state.textContent = `Not saved: ${err.message}`; }
    save.disabled = false;
  } }, "Save");
  const reports = h("div", { id: "reports" }, h("p", { class: "muted" }, "Loading…"));
  add(panel, h("div", { class: "overview" },
    h("div", { class: "card" }, h("h2", { style: { marginTop: 0 } }, "Tags and notes"), tags, notes,
      editable ? h("div", { class: "toolbar" }, save, state) : null),
    h("div", { class: "card" }, h("h2", { style: { marginTop: 0 } }, "Reports"), reports)));
  api.texts(exp.id).then((texts) => {
    clear(reports);
    if (!texts.length) { add(reports, h("p", { class: "muted" }, "No text reported. A script reports some with task.get_logger().report_text(text).")); return; }
    add(reports, texts.map((t) => h("div", { class: "report", "data-title": t.title },
      h("div", { class: "muted small" }, `${t.title || "text"}${t.step !== null && t.step !== undefined ? ` · step ${t.step}` : ""} · ${t.replica}${t.rank !== null && t.rank !== undefined ? ` rank ${t.rank}` : ""}`),
      h("pre", { class: "file" }, t.text))));
  }).catch((err) => { clear(reports); add(reports, h("p", { class: "muted" }, `Could not load: ${err.message}`)); });
}

// Attempts (start, restarts, resumes), checkpoints, what ran (git, versions) and each rank's pace
// with the straggler: GET /experiments/{id}/run and /checkpoints (docs/checkpoints.md).
const SOURCES = new Map(); // experiment id -> its reproducibility record (GET .../source)

function renderRun(panel, exp) {
  const title = () => h("h2", { style: { marginTop: 0 } }, "Attempts, checkpoints and source");
  const box = h("div", { class: "card", id: "run-details" }, title(), h("p", { class: "muted" }, "Loading…"));
  add(panel, h("div", { class: "overview" }, box));
  // The full record (uncommitted diff up to 1 MiB, package list) is written once, at start: fetched
  // until it is there, then kept, so the Overview's refresh of a running experiment does not
  // fetch it every 3 s. An experiment from before records existed has none.
  const record = SOURCES.has(exp.id) ? Promise.resolve(SOURCES.get(exp.id))
    : api.source(exp.id).then((r) => { if (r.snapshot || r.git || r.packages) SOURCES.set(exp.id, r); return r; }, () => ({}));
  Promise.all([api.run(exp.id), api.checkpoints(exp.id), record]).then(([run, ck, rec]) => {
    clear(box);
    add(box, title());
    if (run.attempts.length) {
      add(box, h("h3", {}, "Attempts"), h("table", { id: "attempts" }, run.attempts.map((a) =>
        h("tr", { "data-kind": a.kind },
          h("td", {}, String(a.number)), h("td", {}, a.kind), h("td", {}, badge(a.status)),
          h("td", {}, a.checkpoint_step === null || a.checkpoint_step === undefined ? "" : `from step ${a.checkpoint_step}`),
          h("td", { class: "small reason" }, a.reason || "")))));
    }
    add(box, h("h3", {}, "Checkpoints"), ck.checkpoints.length
      ? h("table", { id: "checkpoints" }, ck.checkpoints.map((c) =>
        h("tr", { "data-step": String(c.step) },
          h("td", {}, `step ${c.step}`),
          h("td", { class: "mono small" }, Object.entries(c.metrics).map(([k, v]) => `${k}=${fmtValue(v)}`).join(", ")),
          h("td", {}, fmtBytes(c.size)), h("td", {}, c.replica),
          h("td", {}, ck.latest && ck.latest.name === c.name ? "latest" : ""))))
      : h("p", { class: "muted" }, "No checkpoints. A script saves one with task.save_checkpoint(obj, step=...)."));
    const s = run.source;
    add(box, h("h3", {}, "Source"), s
      ? h("div", { id: "source", class: "mono small" },
        s.git ? `git ${String(s.git.commit).slice(0, 12)} (${s.git.branch})${s.git.dirty ? " + uncommitted changes" : ""}` : "not a git work tree",
        [s.python ? `python ${s.python}` : "", s.phalanx ? `phalanx ${s.phalanx}` : "",
          s.packages ? plural(s.packages, "package") : "", s.host || ""].filter(Boolean).map((x) => ` · ${x}`).join(""))
      : h("p", { class: "muted" }, "Not recorded."));
    if (s) {
      add(box, sourceDetails(rec),
        h("p", { class: "small" }, h("a", { href: `/compare?ids=${exp.id}`, id: "diff-with" }, "Compare with…"),
          h("span", { class: "muted" }, " another experiment to see its param, file, code and package differences (phalanx diff).")));
    }
    const p = run.pace;
    if (p && p.ranks.length) {
      const slow = p.straggler ? p.straggler.replica : null;
      add(box, h("h3", {}, `Pace (${p.title})`), h("table", { id: "pace" }, p.ranks.map((r) =>
        h("tr", { "data-replica": r.replica },
          h("td", {}, r.replica), h("td", {}, `${r.steps_per_second.toPrecision(3)} steps/s`),
          h("td", {}, [r.replica === slow ? "straggler" : "",
            r.silent_seconds ? ` (no step for ${Math.round(r.silent_seconds)} s)` : ""].join(""))))));
    }
  }).catch((err) => { clear(box); add(box, title(), h("p", { class: "muted" }, `Could not load: ${err.message}`)); });
}
