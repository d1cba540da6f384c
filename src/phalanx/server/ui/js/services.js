// Services (docs/services.md): the TensorBoard button of an experiment's or a group's page (the
// board started on the server, or the one that runs, opened at /services/ID/), and the /services
// page: the running boards and notebook servers of the viewer's projects, each opened or stopped,
// and a form that starts a project's notebook server or board. Refreshed every few seconds.

import { api } from "./api.js";
import { add, clear, fmtAgo, h } from "./util.js";

// target: {experiment: id} or {group: id}
export function tensorboardButton(target) {
  const button = h("button", { id: "tensorboard", title: "TensorBoard of what this reported (a viewer's right)", onclick: async () => {
    button.disabled = true;
    button.textContent = "Starting TensorBoard…";
    try {
      const service = await api.tensorboard(target);
      location.href = service.path;
    } catch (err) {
      alert(`Could not start TensorBoard: ${err.message}`);
      button.disabled = false;
      button.textContent = "TensorBoard";
    }
  } }, "TensorBoard");
  return button;
}

const targetText = (t) => (t.kind === "project" ? `project ${t.id}` : t.kind === "model" ? `model ${t.id}` : `${t.kind} ${t.id.slice(0, 8)}`);

export function renderServices(root, ctx) {
  let timer = null;
  const project = h("input", { id: "service-project", placeholder: "project", "aria-label": "project", size: 14 });
  const inputs = h("input", { id: "service-inputs", placeholder: "digits=digits@latest, ...", "aria-label": "a notebook's inputs", size: 30 });
  const model = h("input", { id: "service-model", placeholder: "digits@prod", "aria-label": "a registered model to serve", size: 14 });
  const said = h("span", { class: "muted small", id: "service-said" });

  async function serve() {
    const ref = model.value.trim();
    if (!ref) { said.textContent = "name a registered model first (NAME@alias)"; return; }
    said.textContent = `serving ${ref}…`;
    try {
      const service = await api.startService("model", { model: ref });
      said.textContent = `${ref} served: POST ${service.path}v1/models/${ref.split("@")[0]}:predict`;
      load();
    } catch (err) { said.textContent = `could not serve it: ${err.message}`; }
  }

  async function start(kind) {
    const body = { project: project.value.trim() };
    if (!body.project) { said.textContent = "name a project first"; return; }
    if (kind === "notebook") {
      body.inputs = inputs.value.split(",").map((x) => x.trim()).filter(Boolean).map((x) => {
        const [name, what] = x.split("=");
        return what && what.startsWith("datastore:") ? { name, datastore: what.slice(10) } : { name, dataset: what };
      });
    }
    said.textContent = `starting the ${kind}…`;
    try {
      const service = await api.startService(kind, body);
      location.href = service.path;
    } catch (err) { said.textContent = `could not start it: ${err.message}`; }
  }

  async function stop(service, button) {
    if (!confirm(`Stop ${service.kind} ${service.id}? A notebook's files stay in its project's folder.`)) return;
    button.disabled = true;
    try { await api.stopService(service.id); } catch (err) { alert(`Could not stop: ${err.message}`); }
    load();
  }

  function draw(found) {
    const rows = found.map((s) => h("tr", { "data-id": s.id, "data-kind": s.kind },
      h("td", {}, s.replicas > 1 ? `${s.kind} ×${s.replicas}` : s.kind), h("td", {}, s.project), h("td", {}, targetText(s.target)),
      h("td", {}, s.started_by), h("td", {}, fmtAgo(s.started_at)), h("td", { class: "num" }, `${Math.round(s.idle_seconds)} s`),
      h("td", {}, h("a", { href: s.path }, "Open"), " ",
        (() => { const b = h("button", { class: "danger", onclick: () => stop(s, b) }, "Stop"); return b; })())));
    add(clear(root),
      h("div", { class: "toolbar" }, h("h1", {}, "Services"),
        h("span", { class: "muted" }, " TensorBoards, notebook servers and served models of your projects, behind this server")),
      h("div", { class: "toolbar" }, project, inputs,
        h("button", { id: "start-notebook", onclick: () => start("notebook") }, "Start notebook"),
        h("button", { id: "start-board", onclick: () => start("tensorboard") }, "Start TensorBoard"),
        model, h("button", { id: "serve-model", onclick: serve }, "Serve model"), said),
      found.length ? h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "services" },
        h("thead", {}, h("tr", {}, ["kind", "project", "of", "started by", "started", "idle", ""].map((c) => h("th", {}, c)))),
        h("tbody", {}, rows)))
        : h("p", { class: "muted", id: "no-services" }, "No service runs. An experiment's or a group's page starts its TensorBoard."));
  }

  async function load() {
    clearTimeout(timer);
    try { draw(await api.services()); } catch (err) { add(clear(root), h("p", { class: "error" }, err.message)); }
    if (ctx.alive()) timer = setTimeout(() => { if (!root.contains(document.activeElement) || document.activeElement === document.body) load(); else timer = setTimeout(load, 5000); }, 5000);
  }
  load();
}
