// The model registry: /models (every registered model, its latest version and aliases) and
// /models/{name} (its versions: aliases, the experiment each came from, parity, signature, final
// metrics). Read-only: `phalanx models alias` and the REST API move aliases.

import { api } from "./api.js";
import { clear, fmtTime, h, add } from "./util.js";

const num = (v) => (typeof v === "number" ? String(Number(v.toPrecision(4))) : String(v));
const aliasChips = (aliases) => aliases.length
  ? aliases.map((a) => h("span", { class: "tag", "data-alias": a }, `@${a}`))
  : "—";
const shapes = (items) => (items || []).map((i) => `${i.name}: ${i.dtype}[${i.shape.map((d) => (d === null ? "?" : d)).join(", ")}]`).join("; ");
// what the version's experiment read (issue 26's inputs): a dataset version with its digest, or a datastore path
const dataOf = (inputs) => (inputs || []).map((r) => (r.kind === "dataset"
  ? `${r.name}: ${r.ref} (${String(r.digest || "").slice(0, 12)})`
  : `${r.name}: datastore ${r.datastore}${r.path ? `:${r.path}` : ""}`)).join("; ");
const parity = (p) => (!p || p.passed === undefined ? "—" : `${p.passed ? "passed" : "FAILED"} (max diff ${Number(p.max_abs_diff).toPrecision(2)})`);

export async function renderModels(root) {
  clear(root);
  add(root, h("div", { class: "toolbar" }, h("h1", {}, "Models")));
  let models;
  try { models = await api.registeredModels(); } catch (e) { add(root, h("p", { class: "error" }, String(e.message))); return; }
  if (!models.length) {
    add(root, h("p", { class: "muted" }, "No registered models yet: `phalanx models register EXPERIMENT --name NAME` adds one."));
    return;
  }
  const rows = models.map((m) => h("tr", { "data-model": m.name },
    h("td", {}, h("a", { href: `/models/${encodeURIComponent(m.name)}` }, m.name)),
    h("td", {}, m.latest_version === null ? "—" : String(m.latest_version)),
    h("td", {}, Object.entries(m.aliases).length
      ? Object.entries(m.aliases).map(([a, v]) => h("span", { class: "tag", "data-alias": a }, `@${a} → ${v}`))
      : "—"),
    h("td", {}, m.description || ""),
    h("td", {}, fmtTime(m.updated_at))));
  add(root, h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "models" },
    h("thead", {}, h("tr", {}, ["name", "latest", "aliases", "description", "updated"].map((c) => h("th", {}, c)))),
    h("tbody", {}, rows))));
}

export async function renderModel(root, name) {
  clear(root);
  let m;
  try { m = await api.registeredModel(name); } catch (e) {
    add(root, h("p", { class: "error" }, String(e.message))); return;
  }
  add(root, h("div", { class: "toolbar" },
    h("h1", {}, h("a", { href: "/models" }, "Models"), ` / ${m.name}`)));
  if (m.description) add(root, h("p", {}, m.description));
  const rows = [...m.versions].reverse().map((v) => {
    const metrics = Object.entries(v.lineage.metrics || {}).map(([k, x]) => `${k} ${num(x)}`).join(", ");
    const exp = v.lineage.experiment || {};
    return h("tr", { "data-version": v.version },
      h("td", {}, String(v.version)),
      h("td", {}, aliasChips(v.aliases)),
      h("td", {}, h("a", { href: `/experiments/${encodeURIComponent(v.experiment_id)}` }, v.experiment_id),
        exp.name ? h("span", { class: "muted small" }, ` ${exp.name}`) : ""),
      h("td", {}, parity(v.lineage.parity)),
      h("td", { class: "small" }, `in ${shapes(v.signature.inputs)} · out ${shapes(v.signature.outputs)}`),
      h("td", { class: "small" }, metrics || "—"),
      h("td", { class: "small", "data-col": "data" }, dataOf(v.lineage.inputs) || "—"),
      h("td", {}, h("a", { href: `/api/v1/models/${encodeURIComponent(m.name)}/versions/${v.version}/file` }, "onnx")),
      h("td", {}, fmtTime(v.created_at)));
  });
  add(root, h("div", { class: "table-wrap" }, h("table", { class: "grid", id: "versions" },
    h("thead", {}, h("tr", {}, ["version", "aliases", "experiment", "parity", "signature", "final metrics", "data", "file", "registered"].map((c) => h("th", {}, c)))),
    h("tbody", {}, rows))));
}
