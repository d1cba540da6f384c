// Queue: this machine's runs holding cores/GPUs and the ones waiting, in order, with why they wait;
// a waiting one can be stopped (it leaves the queue). Refreshed every few seconds.

import { api } from "./api.js";
import { clear, fmtAgo, h, add } from "./util.js";

const needText = (n) => [n.cpus ? `${n.cpus} cores` : "", n.gpus ? `${n.gpus} GPUs` : "",
  n.memory_mib ? `${n.memory_mib} MiB` : ""].filter(Boolean).join(", ") || "—";

export function renderQueue(root, ctx) {
  let timer = null;
  const link = (id, name) => h("a", { href: `/experiments/${encodeURIComponent(id)}` }, name ? `${name} (${id.slice(0, 6)})` : id);

  async function stop(row, button) {
    if (!confirm(`Stop ${row.name || row.experiment_id}? It leaves the queue and never starts.`)) return;
    button.disabled = true;
    try { await api.stop(row.experiment_id); } catch (err) { alert(`Could not stop: ${err.message}`); }
    load();
  }

  function draw(doc) {
    const m = doc.machine;
    const f = doc.free;
    add(clear(root),
      h("div", { class: "toolbar" }, h("h1", {}, "Queue"),
        h("span", { class: "muted" }, ` this machine: ${m.cpus} cores, ${m.gpus} GPUs, ${m.memory_mib} MiB · free: ${f.cpus} cores, ${f.gpus} GPUs, ${f.memory_mib} MiB`)),
      h("h2", {}, "Running ", h("span", { class: "muted small" }, String(doc.running.length))),
      doc.running.length ? h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "queue-running" },
        h("thead", {}, h("tr", {}, ["experiment", "holds", "cores", "GPUs", "since"].map((c) => h("th", {}, c)))),
        h("tbody", {}, doc.running.map((r) => h("tr", { "data-id": r.experiment_id },
          h("td", {}, link(r.experiment_id, r.name)), h("td", {}, needText(r.needs)),
          h("td", { class: "mono" }, r.cpus.join(",") || "—"), h("td", { class: "mono" }, r.gpus.join(",") || "—"),
          h("td", { class: "num" }, fmtAgo(r.since)))))))
        : h("p", { class: "muted" }, "Nothing holds this machine's cores or GPUs."),
      h("h2", {}, "Waiting ", h("span", { class: "muted small" }, String(doc.queued.length))),
      doc.queued.length ? h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "queue-waiting" },
        h("thead", {}, h("tr", {}, ["#", "experiment", "needs", "priority", "waiting", "why", ""].map((c) => h("th", {}, c)))),
        h("tbody", {}, doc.queued.map((r) => {
          const button = h("button", { class: "small", onclick: () => stop(r, button) }, "Stop");
          return h("tr", { "data-id": r.experiment_id },
            h("td", { class: "num" }, String(r.position)), h("td", {}, link(r.experiment_id, r.name)),
            h("td", {}, needText(r.needs)),
            h("td", { class: "num", title: `effective ${Number(r.effective_priority).toFixed(1)} (a waiting run gains a point per 10 minutes)` }, String(r.priority)),
            h("td", { class: "num" }, fmtAgo(r.since)), h("td", { class: "why" }, r.why), h("td", {}, button));
        }))))
        : h("p", { class: "muted" }, "No run is waiting. `phalanx run` queues an experiment here when this machine is busy."),
    );
  }

  async function load() {
    clearTimeout(timer);
    try { draw(await api.queue()); } catch (err) {
      add(clear(root), h("p", { class: "error" }, `Could not read the queue: ${err.message}`));
    }
    if (ctx.alive()) timer = setTimeout(load, 3000);
  }
  load();
  return () => clearTimeout(timer);
}
