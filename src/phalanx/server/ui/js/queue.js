// Queue: this machine's runs holding cores/GPUs and the ones waiting, in order, with why they wait,
// their project, target, priority and fair share; each project's quota and usage; runs waiting on
// the server's cluster targets. A run of a project the viewer is not in is drawn masked (no name,
// no link, no Stop); whoever may edit a run's project can stop it or change its priority.
// Refreshed every few seconds (not while a priority is being typed).

import { api } from "./api.js";
import { clear, plural, fmtAgo, h, add } from "./util.js";

const needText = (n) => [n.cpus ? plural(n.cpus, "core") : "", n.gpus ? plural(n.gpus, "GPU") : "",
  n.memory_mib ? `${n.memory_mib} MiB` : ""].filter(Boolean).join(", ") || "—";
const quotaText = (q) => !q ? "no quota" : [q.cores != null ? plural(q.cores, "core") : "", q.gpus != null ? plural(q.gpus, "GPU") : "",
  q.memory_mib != null ? `${q.memory_mib} MiB` : "", q.max_waiting != null ? `${q.max_waiting} waiting` : ""].filter(Boolean).join(", ") || "no limit";
const share = (p) => (p ? `−${Number(p).toFixed(2)}` : "0");
const table = (id, heads, rows) => h("div", { class: "table-wrap" }, h("table", { class: "grid", id },
  h("thead", {}, h("tr", {}, heads.map((c) => h("th", {}, c)))), h("tbody", {}, rows)));

export function renderQueue(root, ctx) {
  let timer = null;

  // a masked row (another project's run) names nothing and links nowhere
  const who = (r) => r.masked || !r.experiment_id
    ? h("span", { class: "masked muted", title: "a run of a project you are not a member of" }, r.name || "(a run of another project)")
    : h("a", { href: `/experiments/${encodeURIComponent(r.experiment_id)}` }, r.name ? `${r.name} (${r.experiment_id.slice(0, 6)})` : r.experiment_id);
  const project = (r) => h("td", {}, r.masked ? h("span", { class: "muted" }, "—") : r.project || "—");
  const rowAttrs = (r) => ({ "data-id": r.experiment_id || "", class: r.masked ? "masked" : "" });

  async function stop(row, button) {
    if (!confirm(`Stop ${row.name || row.experiment_id}? It leaves the queue and never starts.`)) return;
    button.disabled = true;
    try { await api.stop(row.experiment_id); } catch (err) { alert(`Could not stop: ${err.message}`); }
    load();
  }

  async function reprioritise(row, input) {
    const value = Number(input.value);
    if (!Number.isInteger(value) || value === row.priority) { input.value = row.priority; return; }
    input.disabled = true;
    try { await api.reprioritise(row.experiment_id, value); } catch (err) { alert(`Could not change the priority: ${err.message}`); }
    input.blur();
    load();
  }

  function priorityCell(r) {
    const title = `effective ${Number(r.effective_priority).toFixed(1)} (a waiting run gains a point per 10 minutes)`;
    if (!r.may_change) return h("td", { class: "num", title }, String(r.priority));
    const input = h("input", { type: "number", class: "priority", value: r.priority, min: -1000, max: 1000, step: 1,
      "aria-label": `priority of ${r.name || r.experiment_id}`, title });
    input.addEventListener("change", () => reprioritise(r, input));
    input.addEventListener("keydown", (ev) => { if (ev.key === "Enter") input.blur(); });
    return h("td", { class: "num" }, input);
  }

  function draw(doc) {
    const m = doc.machine;
    const f = doc.free;
    const elsewhere = doc.elsewhere || [];
    add(clear(root),
      h("div", { class: "toolbar" }, h("h1", {}, "Queue"),
        h("span", { class: "muted" }, ` this machine (target ${doc.target || "local"}): ${plural(m.cpus, "core")}, ${plural(m.gpus, "GPU")}, ${m.memory_mib} MiB · free: ${plural(f.cpus, "core")}, ${plural(f.gpus, "GPU")}, ${f.memory_mib} MiB`)),
      h("h2", {}, "Running ", h("span", { class: "muted small" }, String(doc.running.length))),
      doc.running.length ? table("queue-running", ["experiment", "project", "target", "holds", "cores", "GPUs", "since"],
        doc.running.map((r) => h("tr", rowAttrs(r),
          h("td", {}, who(r)), project(r), h("td", {}, r.target || "local"), h("td", {}, needText(r.needs)),
          h("td", { class: "mono" }, r.cpus.join(",") || "—"), h("td", { class: "mono" }, r.gpus.join(",") || "—"),
          h("td", { class: "num" }, fmtAgo(r.since)))))
        : h("p", { class: "muted" }, "Nothing holds this machine's cores or GPUs."),
      h("h2", {}, "Waiting ", h("span", { class: "muted small" }, String(doc.queued.length))),
      doc.queued.length ? table("queue-waiting", ["#", "experiment", "project", "target", "needs", "priority", "fair share", "waiting", "why", ""],
        doc.queued.map((r) => {
          const button = r.may_change ? h("button", { class: "small", onclick: () => stop(r, button) }, "Stop") : null;
          return h("tr", rowAttrs(r),
            h("td", { class: "num" }, String(r.position)), h("td", {}, who(r)), project(r),
            h("td", {}, r.target || "local"), h("td", {}, needText(r.needs)), priorityCell(r),
            h("td", { class: "num share", title: "the project's fair-share penalty: its recent use of the machine lowers its runs' order" }, share(r.share_penalty)),
            h("td", { class: "num" }, fmtAgo(r.since)), h("td", { class: "why" }, r.why), h("td", {}, button));
        }))
        : h("p", { class: "muted" }, "No run is waiting. `phalanx run` queues an experiment here when this machine is busy."),
      doc.projects && doc.projects.length ? [h("h2", {}, "Projects"),
        table("queue-projects", ["project", "quota", "holds", "waiting", "recent core-seconds", "fair share"],
          doc.projects.map((p) => h("tr", { "data-project": p.project },
            h("td", {}, p.project), h("td", { class: "quota" }, quotaText(p.quota)), h("td", {}, needText(p.holds)),
            h("td", { class: "num" }, String(p.waiting)), h("td", { class: "num" }, String(p.recent_core_seconds)),
            h("td", { class: "num share" }, share(p.share_penalty)))))] : null,
      elsewhere.length ? [h("h2", {}, "On cluster targets ", h("span", { class: "muted small" }, String(elsewhere.length))),
        table("queue-elsewhere", ["experiment", "project", "target", "state", "why", "waiting"],
          elsewhere.map((r) => h("tr", rowAttrs(r), h("td", {}, who(r)), project(r), h("td", {}, r.target),
            h("td", {}, r.state), h("td", { class: "why" }, r.why), h("td", { class: "num" }, fmtAgo(r.since)))))] : null,
    );
  }

  async function load() {
    clearTimeout(timer);
    const typing = root.contains(document.activeElement) && document.activeElement.matches("input.priority");
    if (!typing) {
      try { draw(await api.queue()); } catch (err) {
        add(clear(root), h("p", { class: "error" }, `Could not read the queue: ${err.message}`));
      }
    }
    if (ctx.alive()) timer = setTimeout(load, 3000);
  }
  load();
  return () => clearTimeout(timer);
}
