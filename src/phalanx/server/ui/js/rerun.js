// "Run again with…": a form of an experiment's params and priority that clones it and enqueues the
// clone on this server (POST /experiments {"from": ID, "params": {...}, "priority": N}, the rerun
// rule of `phalanx rerun`). Only the params the user changed are sent, over the recorded ones. The
// server validates them against the experiment file before anything is queued; its refusal
// (FILE:LINE:COL problems, a missing snapshot) is shown in the form, and nothing is started.

import { api } from "./api.js";
import { add, clear, h } from "./util.js";

// What a typed value looks like in a text box: strings as they are, everything else as JSON. What
// the user types back is sent as text and read by the server as `--param NAME=VALUE` reads VALUE
// (0.05 a number, true a boolean, [1, 2] a list; a list that is not JSON is refused).
const shown = (v) => (typeof v === "string" ? v : JSON.stringify(v));

function newKey() {
  if (globalThis.crypto && crypto.randomUUID) return crypto.randomUUID();
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

export function rerunForm(exp, close) {
  const params = Object.entries((exp.plan || {}).params || {});
  const key = newKey(); // one form, one experiment: a second click after a lost answer is a retry
  const inputs = params.map(([name, value]) => {
    const input = h("input", { type: "text", name, "data-param": name, value: shown(value),
      "aria-label": `param ${name}`, style: { width: "100%" } });
    return [name, value, input];
  });
  const priority = h("input", { type: "number", id: "rerun-priority", value: "0", step: "1",
    "aria-label": "priority", style: { width: "100%" } });
  const error = h("div", { id: "rerun-error", class: "alert bad", role: "alert", hidden: true });
  const submit = h("button", { class: "primary", type: "submit", id: "rerun-submit" }, "Enqueue");
  const form = h("form", { id: "rerun-form", class: "card", onsubmit: async (ev) => {
    ev.preventDefault();
    const changed = {};
    for (const [name, value, input] of inputs) {
      if (input.value !== shown(value)) changed[name] = input.value;
    }
    submit.disabled = true;
    error.hidden = true;
    try {
      const r = await api.clone({ from: exp.id, texts: changed, priority: Number(priority.value || 0) }, key);
      location.href = `/experiments/${encodeURIComponent(r.id)}`;
    } catch (err) {
      clear(error);
      add(error, h("b", {}, "Not enqueued: "), h("pre", { class: "file" }, err.message));
      error.hidden = false;
      submit.disabled = false;
    }
  } },
  h("h2", { style: { marginTop: 0 } }, "Run again with…"),
  h("p", { class: "muted small" }, `The same experiment file and code snapshot as ${exp.id}, with these params.`),
  params.length
    ? h("table", { class: "grid params-table", id: "rerun-params" }, h("tbody", {}, inputs.map(([name, , input]) =>
      h("tr", {}, h("td", { class: "key mono" }, h("label", {}, name)), h("td", { class: "value" }, input)))))
    : h("p", { class: "muted" }, "The experiment file declares no params."),
  h("label", { class: "small" }, "priority (higher starts first) ", priority),
  error,
  h("div", { class: "toolbar" }, submit, h("button", { type: "button", onclick: close }, "Cancel")));
  return form;
}
