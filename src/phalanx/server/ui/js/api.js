// The REST API as the UI uses it. A 401 sends the browser to the login page.

const BASE = "/api/v1";

export class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

// A server restart (or a network blip) must not replace the page with "Failed to fetch": reads are
// retried with backoff (0.5 s doubling to 5 s) for as long as it takes, under a "Reconnecting…"
// banner. Writes (stop, delete) are not retried: the user sees the error and decides.
let banner = null;
function reconnecting(on) {
  if (on && !banner) {
    banner = document.createElement("div");
    banner.id = "reconnecting";
    banner.className = "reconnecting";
    banner.setAttribute("role", "status");
    banner.textContent = "Reconnecting to the server…";
    document.body.append(banner);
  } else if (!on && banner) { banner.remove(); banner = null; }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function fetchRetrying(url, options) {
  const read = !options.method || options.method === "GET";
  for (let delay = 500; ; delay = Math.min(delay * 2, 5000)) {
    let res = null;
    try { res = await fetch(url, options); } catch (err) { if (!read) throw err; }
    if (res && !(read && [502, 503, 504].includes(res.status))) { reconnecting(false); return res; }
    reconnecting(true);
    await sleep(delay);
  }
}

async function request(path, options = {}) {
  const res = await fetchRetrying(BASE + path, { credentials: "same-origin", ...options });
  if (res.status === 401) {
    location.href = `/login?next=${encodeURIComponent(location.pathname + location.search + location.hash)}`;
    throw new ApiError(401, "unauthorized", "sign in first");
  }
  if (!res.ok) {
    let body = {};
    try { body = await res.json(); } catch { /* not JSON */ }
    throw new ApiError(res.status, body.error || "error", body.message || res.statusText);
  }
  if (res.status === 204) return null;
  return res.json();
}

const enc = encodeURIComponent;
// {k: v, k2: [a, b]} -> "k=v&k2=a&k2=b" (a list is a repeated parameter)
function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) for (const x of Array.isArray(v) ? v : [v]) q.append(k, x);
  return q;
}
const encPath = (p) => p.split("/").map(enc).join("/");

// Charts ask for the compact form (docs/server.md: delta-coded steps and times, values to what a
// chart shows, gzip) and get back the JSON form's shape: {title, x, series: {name: {steps, values,
// times, count, downsampled}}}. The running sums match phalanx.server.chartdata.decode exactly.
export function decodeCompact(doc) {
  const series = {};
  for (const [name, s] of Object.entries(doc.series)) {
    const n = s.values.length;
    const steps = new Array(n);
    const times = s.time0 === null || s.time0 === undefined || !n ? [] : new Array(n);
    let step = s.step0;
    let ms = 0;
    for (let i = 0; i < n; i++) {
      if (i) { step += s.dsteps[i - 1]; if (times.length) ms += s.dtimes_ms[i - 1]; }
      steps[i] = step;
      if (times.length) times[i] = i ? s.time0 + ms / 1000 : s.time0;
    }
    series[name] = { steps, values: s.values, times, count: s.count, downsampled: s.downsampled };
  }
  return { title: doc.title, x: doc.x, series };
}

export const api = {
  experiments: (params) => request(`/experiments?${query(params)}`),
  annotate: (id, body) => request(`/experiments/${enc(id)}`, {
    method: "PATCH", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) }),
  texts: (id) => request(`/experiments/${enc(id)}/texts`),
  run: (id) => request(`/experiments/${enc(id)}/run`),
  checkpoints: (id) => request(`/experiments/${enc(id)}/checkpoints`),
  source: (id) => request(`/experiments/${enc(id)}/source`),
  diff: (a, b) => request(`/experiments/${enc(a)}/diff/${enc(b)}`),
  columns: () => request("/columns"),
  experiment: (id) => request(`/experiments/${enc(id)}`),
  datasetVersion: (name, version) => request(`/datasets/${enc(name)}/versions/${enc(version)}`),
  stop: (id) => request(`/experiments/${enc(id)}/stop`, { method: "POST" }),
  remove: (id) => request(`/experiments/${enc(id)}`, { method: "DELETE" }),
  titles: (id) => request(`/experiments/${enc(id)}/metrics`),
  metric: (id, title, params) => request(`/experiments/${enc(id)}/metrics/${encPath(title)}?${new URLSearchParams({ ...params, format: "compact" })}`).then(decodeCompact),
  params: (id) => request(`/experiments/${enc(id)}/params`),
  // Compare: every run, its params and titles in one answer; one title's points of every run in one
  compare: (ids) => request(`/compare?${new URLSearchParams({ ids: ids.join(",") })}`),
  metricOfRuns: (title, ids, params) => request(`/metrics/${encPath(title)}?${new URLSearchParams({ ...params, ids: ids.join(",") })}`)
    .then((doc) => Object.fromEntries(Object.entries(doc.runs).map(([id, run]) => [id, decodeCompact({ title: doc.title, x: doc.x, series: run.series })]))),
  artifacts: (id) => request(`/experiments/${enc(id)}/artifacts`),
  // the Logger's debug samples and plots: artifacts of kind "report" (metadata: report, title, series, step, rank)
  reports: (id) => request(`/experiments/${enc(id)}/artifacts?kind=report`),
  artifactJson: (id, name) => request(`/experiments/${enc(id)}/artifacts/${encPath(name)}`),
  preview: (id, name) => request(`/experiments/${enc(id)}/previews/${encPath(name)}`),
  models: (id) => request(`/experiments/${enc(id)}/models`),
  logs: (id, params) => request(`/experiments/${enc(id)}/logs?${new URLSearchParams(params)}`),
  artifactUrl: (id, name, inline = false) => `${BASE}/experiments/${enc(id)}/artifacts/${encPath(name)}${inline ? "?inline=true" : ""}`,
  modelUrl: (id, name) => `${BASE}/experiments/${enc(id)}/models/${encPath(name)}`,
  logsTextUrl: (id, params) => `${BASE}/experiments/${enc(id)}/logs.txt?${new URLSearchParams(params)}`,
  logStreamUrl: (id, params) => `${BASE}/experiments/${enc(id)}/logs/stream?${new URLSearchParams(params)}`,
  // clone and enqueue: {from, params, priority}; the key makes a double click one experiment
  clone: (body, key) => request("/experiments", {
    method: "POST", headers: { "Content-Type": "application/json", "Idempotency-Key": key }, body: JSON.stringify(body) }),
  groups: () => request("/groups"),
  group: (id) => request(`/groups/${enc(id)}`),
  removeGroup: (id) => request(`/groups/${enc(id)}`, { method: "DELETE" }),
  // the model registry (not an experiment's model files: `models` above)
  registeredModels: () => request("/models"),
  registeredModel: (name) => request(`/models/${enc(name)}`),
  me: () => request("/me"),
  queue: () => request("/queue"),
  reprioritise: (id, priority) => request(`/queue/${enc(id)}`, {
    method: "PATCH", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ priority }) }),
  sweep: (params) => request(`/sweep?${query(params)}`),
  // a TensorBoard service: {experiment: id} or {group: id}; the one that runs when there is one
  tensorboard: (target) => request("/services", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ kind: "tensorboard", ...target }) }),
  startService: (kind, body) => request("/services", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ kind, ...body }) }),
  services: () => request("/services"),
  stopService: (id) => request(`/services/${enc(id)}`, { method: "DELETE" }),
  alerts: () => request("/alerts"),
  addAlert: (project, body) => request(`/projects/${enc(project)}/alerts`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) }),
  removeAlert: (id) => request(`/alerts/${enc(id)}`, { method: "DELETE" }),
  deliveries: (id, limit = 20) => request(`/alerts/${enc(id)}/deliveries?limit=${limit}`),
};
