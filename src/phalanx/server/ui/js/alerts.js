// Alerts (docs/alerts.md): the webhooks of the viewer's projects, each with its delivery log (what
// was sent about which experiment, group or model, and each try's answer), a form that adds a hook
// (its secret shown once, as the CLI shows it) and a Remove button. A viewer sees the hooks with
// their URLs cut to the host; adding and removing are an editor's (the API says so when refused).

import { api } from "./api.js";
import { add, clear, fmtAgo, h } from "./util.js";

const EVENTS = ["failed", "succeeded", "stopped", "stalled", "straggling", "waiting", "group.finished", "model.alias"];

function about(d) {
  if (d.experiment_id) return h("a", { href: `/experiments/${encodeURIComponent(d.experiment_id)}` }, `experiment ${d.experiment_id.slice(0, 8)}`);
  if (d.group_id) return h("a", { href: `/groups/${encodeURIComponent(d.group_id)}` }, `group ${d.group_id.slice(0, 8)}`);
  if (d.model) return h("a", { href: `/models/${encodeURIComponent(d.model)}` }, `model ${d.model}`);
  return "";
}

function lastTry(d) {
  const t = d.attempts[d.attempts.length - 1];
  if (!t) return "not tried yet";
  const answer = t.status_code === null ? (t.error || "no answer") : `HTTP ${t.status_code}${t.error ? `: ${t.error}` : ""}`;
  return `${answer} (${d.attempts.length} ${d.attempts.length === 1 ? "try" : "tries"}, ${fmtAgo(t.at)})`;
}

function deliveriesTable(found) {
  if (!found.length) return h("p", { class: "muted small no-deliveries" }, "Nothing sent yet.");
  return h("table", { class: "grid deliveries" },
    h("thead", {}, h("tr", {}, ["event", "about", "state", "last try", "queued"].map((c) => h("th", {}, c)))),
    h("tbody", {}, found.map((d) => h("tr", { "data-id": d.id, "data-state": d.state },
      h("td", {}, d.event), h("td", {}, about(d)), h("td", {}, h("span", { class: `badge ${d.state}` }, d.state)),
      h("td", { class: "small" }, lastTry(d)), h("td", {}, fmtAgo(d.created_at))))));
}

export function renderAlerts(root, ctx) {
  let timer = null;
  const open = new Set(); // the hooks whose delivery log is shown
  const project = h("input", { id: "alert-project", placeholder: "project", "aria-label": "project", size: 14 });
  const url = h("input", { id: "alert-url", placeholder: "https://hooks.example.org/phalanx", "aria-label": "the receiver's URL", size: 36 });
  const events = h("input", { id: "alert-events", value: "failed", "aria-label": "events, comma-separated", size: 24, title: EVENTS.join(", ") });
  const said = h("span", { class: "muted small", id: "alert-said" });

  async function addHook() {
    const body = { url: url.value.trim(), events: events.value.split(",").map((x) => x.trim()).filter(Boolean) };
    if (!project.value.trim() || !body.url) { said.textContent = "name a project and the receiver's URL first"; return; }
    try {
      const hook = await api.addAlert(project.value.trim(), body);
      said.textContent = "";
      add(clear(said), h("span", { id: "alert-secret" },
        `hook ${hook.id} added; its secret (shown once; the receiver checks signatures with it): `, h("code", {}, hook.secret)));
      url.value = "";
      load();
    } catch (err) { said.textContent = `could not add it: ${err.message}`; }
  }

  async function remove(hook, button) {
    if (!confirm(`Remove hook ${hook.id} (${hook.url})? Nothing more is sent to it.`)) return;
    button.disabled = true;
    try { await api.removeAlert(hook.id); open.delete(hook.id); } catch (err) { alert(`Could not remove: ${err.message}`); }
    load();
  }

  async function row(hook) {
    const shown = open.has(hook.id);
    const toggle = h("button", { class: "deliveries-toggle", onclick: () => { if (shown) open.delete(hook.id); else open.add(hook.id); load(); } },
      shown ? "Hide deliveries" : "Deliveries");
    const removeButton = h("button", { class: "danger", onclick: () => remove(hook, removeButton) }, "Remove");
    const cells = h("tr", { "data-id": hook.id },
      h("td", {}, hook.project), h("td", { class: "small" }, hook.url), h("td", {}, hook.events.join(", ")),
      h("td", {}, hook.created_by || "-"), h("td", {}, fmtAgo(hook.created_at)), h("td", {}, toggle, " ", removeButton));
    if (!shown) return [cells];
    let log;
    try { log = deliveriesTable(await api.deliveries(hook.id)); } catch (err) { log = h("p", { class: "error" }, err.message); }
    return [cells, h("tr", { class: "deliveries-row", "data-hook": hook.id }, h("td", { colspan: 6 }, log))];
  }

  async function draw(hooks) {
    const rows = (await Promise.all(hooks.map(row))).flat();
    add(clear(root),
      h("div", { class: "toolbar" }, h("h1", {}, "Alerts"),
        h("span", { class: "muted" }, " webhooks told when your projects' experiments end or stall, groups finish, model aliases move")),
      h("div", { class: "toolbar" }, project, url, events, h("button", { id: "add-alert", onclick: addHook }, "Add hook"), said),
      hooks.length ? h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "alerts" },
        h("thead", {}, h("tr", {}, ["project", "url", "events", "added by", "added", ""].map((c) => h("th", {}, c)))),
        h("tbody", {}, rows)))
        : h("p", { class: "muted", id: "no-alerts" }, "No hook yet: add one above, or with `phalanx alert add`."));
  }

  async function load() {
    clearTimeout(timer);
    try { await draw(await api.alerts()); } catch (err) { add(clear(root), h("p", { class: "error" }, err.message)); }
    if (ctx.alive()) timer = setTimeout(() => { if (!root.contains(document.activeElement) || document.activeElement === document.body) load(); else timer = setTimeout(load, 5000); }, 5000);
  }
  load();
}
