// Data an experiment read: the Inputs card on its Overview (each input's dataset version, linked to
// its page, or its datastore folder) and /datasets/{name}/versions/{version} (a version's digest,
// where its bytes are and its files with their hashes). Read-only: `phalanx data` records versions.

import { api } from "./api.js";
import { clear, fmtBytes, fmtTime, h, add } from "./util.js";

const enc = encodeURIComponent;

export function versionHref(name, version) {
  return `/datasets/${enc(name)}/versions/${enc(version)}`;
}

// One row per input of the experiment's plan (plan.inputs, its lineage records).
export function inputsCard(exp) {
  const inputs = ((exp.plan || {}).inputs || []).filter((r) => r && typeof r === "object" && r.kind);
  if (!inputs.length) return null;
  const what = (r) => (r.kind === "dataset"
    ? [h("a", { href: versionHref(r.dataset, r.version), class: "mono", "data-dataset-version": r.ref }, r.ref),
      h("span", { class: "muted small mono" }, ` ${String(r.digest || "").slice(0, 12)}`)]
    : [h("span", { class: "mono", "data-datastore": r.datastore }, `datastore ${r.datastore}${r.path ? `:${r.path}` : ""}`),
      h("div", { class: "muted small mono wrap" }, r.url || "")]);
  return h("div", { class: "overview" }, h("div", { class: "card", id: "inputs" },
    h("h2", { style: { marginTop: 0 } }, "Inputs"),
    h("table", { class: "inputs-table" }, h("tbody", {}, inputs.map((r) => h("tr", { "data-input": r.name },
      h("td", {}, h("b", {}, r.name)),
      h("td", { class: "wrap" }, what(r)),
      h("td", { class: "small" }, r.mode || "", r.note ? h("div", { class: "muted" }, r.note) : null),
      h("td", { class: "mono small wrap" }, r.env ? `$${r.env}` : "")))))));
}

export async function renderDatasetVersion(root, name, version) {
  clear(root);
  let v;
  try { v = await api.datasetVersion(name, version); } catch (err) {
    add(root, h("div", { class: "empty" }, `Could not load dataset ${name}@${version}: ${err.message}`));
    return;
  }
  const files = v.manifest || [];
  add(root,
    h("div", { class: "muted small" }, "Datasets / ", v.name),
    h("h1", { id: "dataset-ref" }, v.ref),
    h("div", { class: "card" }, h("dl", { class: "kv", id: "dataset-version" },
      h("dt", {}, "digest"), h("dd", { class: "mono" }, v.digest),
      h("dt", {}, "bytes"), h("dd", {}, v.bytes === "copied" ? "copied to a datastore" : "referenced where they are (checked at fetch)"),
      h("dt", {}, "where"), h("dd", { class: "mono" }, v.url),
      h("dt", {}, "size"), h("dd", {}, `${fmtBytes(v.size)} in ${v.files} file(s)`),
      h("dt", {}, "recorded"), h("dd", {}, fmtTime(v.created_at)))),
    h("h2", {}, "Files"),
    h("div", { class: "card" }, h("table", { id: "dataset-files", class: "inputs-table" }, h("tbody", {},
      files.slice(0, 2000).map((f) => h("tr", { "data-path": f.path },
        h("td", { class: "mono wrap" }, f.path), h("td", {}, fmtBytes(f.size)),
        h("td", { class: "mono small wrap" }, f.sha256.slice(0, 16))))))),
    files.length > 2000 ? h("p", { class: "muted" }, `${files.length - 2000} more files: phalanx data get ${v.ref}`) : null,
  );
}
