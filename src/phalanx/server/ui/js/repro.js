// What ran (the reproducibility record: GET /experiments/{id}/source) and what differs between two
// experiments (GET /experiments/{a}/diff/{b}, the document `phalanx diff A B -o json` prints).
// Diffs and file text come from the user's tree, so every line goes in as a text node (h() never
// uses innerHTML): a line holding "<script>" shows as those characters and never runs.

import { add, plural, fmtBytes, fmtValue, h } from "./util.js";

// A unified diff, one block element per line, coloured by its first character.
export function diffBlock(lines, attrs = {}) {
  return h("pre", { class: "file diff", ...attrs }, lines.map((line) => {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "meta"
      : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del"
        : line.startsWith("diff ") || line.startsWith("index ") ? "meta" : "ctx";
    return h("span", { class: `dl ${kind}` }, line === "" ? " " : line);
  }));
}

const splitLines = (text) => (text.endsWith("\n") ? text.slice(0, -1) : text).split("\n");

// The full record on an experiment's Overview, under the one-line summary (commit, branch, dirty,
// versions, package count, host): the whole commit, platform, the snapshot, the uncommitted diff,
// untracked files and the package list.
export function sourceDetails(record) {
  const git = record.git;
  const snap = record.snapshot;
  const packages = record.packages || [];
  const rows = [
    git ? ["commit", h("span", { class: "mono", id: "source-commit" }, git.commit || "no commit yet")] : null,
    git && git.root ? ["work tree", h("span", { class: "mono" }, git.root)] : null,
    record.platform ? ["platform", record.platform] : null,
    ["snapshot", snap
      ? h("span", { id: "source-snapshot" }, `${plural(snap.files, "file")}, ${fmtBytes(snap.bytes)}`,
        snap.capped_count ? ` (${snap.capped_count} left out over the caps)` : "",
        (snap.skipped || []).length ? h("span", { class: "muted" }, ` · skipped ${snap.skipped.join(", ")}`) : "")
      : "none stored"],
  ].filter(Boolean);
  const out = [h("dl", { class: "kv", id: "source-record" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]))];
  if (git && git.dirty) {
    out.push(h("h3", {}, "Uncommitted changes", git.diff_truncated ? h("span", { class: "muted small" }, " (cut at 1 MiB)") : null));
    if (git.diff) out.push(diffBlock(splitLines(git.diff), { id: "source-diff" }));
    if ((git.untracked || []).length) {
      out.push(h("div", { class: "small", id: "source-untracked" }, "untracked: ", git.untracked.map((u) => h("span", { class: "tag mono" }, u))));
    }
  }
  if (packages.length) {
    // redrawn every few seconds while the experiment runs: an opened list stays open
    out.push(h("details", { id: "source-package-list", open: record.packagesOpen === true,
      ontoggle: (ev) => { record.packagesOpen = ev.target.open; } }, h("summary", {}, plural(packages.length, "package")),
      h("div", { class: "mono small" }, packages.map((p) => h("div", {}, p)))));
  }
  return out;
}

// "a → b" rows of a {key: {a, b}} map; a missing side shows as "—".
function changes(section, map) {
  return h("table", { class: "grid params-table", "data-section": section },
    h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "A"), h("th", {}, "B"))),
    h("tbody", {}, Object.entries(map).map(([k, v]) => h("tr", { class: "differs", "data-key": k },
      h("td", { class: "key mono" }, k), h("td", { class: "value" }, fmtValue(v.a)), h("td", { class: "value" }, fmtValue(v.b))))));
}

// The diff of two experiments, in the sections `phalanx diff` prints.
export function diffView(doc, labelA, labelB) {
  const box = h("div", { class: "card repro-diff", "data-a": doc.a, "data-b": doc.b });
  add(box, h("h3", { style: { marginTop: 0 } }, "A ", h("b", {}, labelA), " → B ", h("b", {}, labelB)));
  const sections = [
    ["Params", "params"], ["Packages", "packages"], ["Git", "git"], ["Versions", "versions"],
  ];
  let any = false;
  for (const [title, key] of sections) {
    const map = doc[key] || {};
    if (!Object.keys(map).length) continue;
    any = true;
    add(box, h("h3", {}, title, h("span", { class: "muted small" }, ` ${Object.keys(map).length} differ`)), changes(key, map));
  }
  if ((doc.file || []).length) { any = true; add(box, h("h3", {}, "Experiment file"), diffBlock(doc.file, { "data-section": "file" })); }
  if ((doc.code || []).length) { any = true; add(box, h("h3", {}, "Code (source snapshots)"), diffBlock(doc.code, { "data-section": "code" })); }
  // what one side never recorded was not compared (the same note as `phalanx diff`)
  for (const [side, label] of [["a", labelA], ["b", labelB]]) {
    const missing = (doc.unrecorded || {})[side] || [];
    if (!missing.length) continue;
    any = true;
    add(box, h("p", { class: "muted", "data-section": "unrecorded" },
      `Not compared: ${label} recorded no ${missing.join(", ")} (a plain script's run, or one recorded before Phalanx kept them).`));
  }
  if (!any) add(box, h("p", { class: "muted", "data-section": "none" }, "No differences in params, file, code, packages or versions."));
  return box;
}
