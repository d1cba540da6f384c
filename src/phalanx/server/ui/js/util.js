// Small DOM and formatting helpers shared by every view. Text always goes in through textContent,
// never innerHTML, so nothing an experiment reported can inject markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "style" && typeof v === "object") Object.assign(el.style, v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// Append children, flattening arrays and skipping null/undefined/false (DOM append would print them).
export function add(el, ...children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// "1 trial", "3 trials", "1,200 points": a count and its noun, in the plural unless it is one.
export function plural(n, one, many = `${one}s`) {
  return `${Number(n).toLocaleString()} ${n === 1 ? one : many}`;
}

export function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }

export function badge(status) { return h("span", { class: `badge ${status}`, "data-status": status }, status); }

const ROLE_WORDS = [["master", "master", "master"], ["worker", "worker", "workers"], ["ps", "ps", "ps"]];

export function topologyText(topology) {
  const t = topology || {};
  const parts = [];
  for (const [key, one, many] of ROLE_WORDS) {
    const n = t[key] || 0;
    if (n > 0) parts.push(`${n} ${n === 1 ? one : many}`);
  }
  for (const [key, n] of Object.entries(t)) {
    if (!ROLE_WORDS.some(([k]) => k === key) && n > 0) parts.push(`${n} ${key}`);
  }
  return parts.join(" · ") || "—";
}

export function fmtTime(epoch) {
  if (!epoch) return "—";
  const d = new Date(epoch * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtAgo(epoch) {
  if (!epoch) return "—";
  const s = Date.now() / 1000 - epoch;
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

export function durationSeconds(e) {
  const start = e.started_at || e.created_at;
  if (!start) return null;
  const end = e.finished_at || (["running", "starting", "pending"].includes(e.status) ? Date.now() / 1000 : null);
  return end ? Math.max(0, end - start) : null;
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  return `${Math.floor(m / 60)}h ${m % 60}m`;
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

export function fmtValue(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

// A number as a table shows it: at most 5 significant digits (0.0031839345902151214 -> 0.0031839,
// 123456789 -> 1.2346e+8); anything else as fmtValue. The cell's title keeps the full value.
export function fmtShort(v) {
  if (typeof v !== "number" || !Number.isFinite(v)) return fmtValue(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e6) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-4)) return v.toExponential(4).replace(/\.?0+e/, "e");
  return String(Number(v.toPrecision(5)));
}

export function fmtResources(res) {
  if (!res) return "";
  const out = [];
  const pick = (r) => (r ? (r.limits ?? r.requests) : null);
  const cpu = pick(res.cpu);
  const mem = pick(res.memory);
  const gpu = pick(res.gpu);
  if (cpu !== null && cpu !== undefined) out.push(`${cpu} cpu`);
  if (mem !== null && mem !== undefined) out.push(`${mem} MiB`);
  if (gpu) out.push(`${gpu} gpu`);
  return out.join(" · ");
}

// Distinct, readable colours for series; stable for a given index.
const PALETTE = ["#3451b2", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0c8599", "#e67700", "#5c940d",
  "#d6336c", "#1971c2", "#862e9c", "#495057"];
export function color(i) { return PALETTE[i % PALETTE.length]; }

// A run's colour, the same on every page and panel: its hue, saturation and lightness come from a
// hash of its id (FNV-1a), not from where it sits in a list, so a run keeps its colour when the
// selection changes. Series `i` of `n` (one per rank, say) are shades of that colour.
export function hashId(id) {
  let x = 0x811c9dc5;
  for (const ch of String(id)) { x ^= ch.codePointAt(0); x = Math.imul(x, 0x01000193) >>> 0; }
  // a final mix, so ids that differ only in their last characters still land far apart in hue
  x ^= x >>> 15; x = Math.imul(x, 0x2c1b3c6d) >>> 0; x ^= x >>> 12; x = Math.imul(x, 0x297a2d39) >>> 0; x ^= x >>> 15;
  return x >>> 0;
}

// Hues handed out to runs shown together (assignRunColours), kept in the browser so that a run keeps
// its colour on its own page and on the next Compare; a run never shown with others keeps its
// hashed hue.
const HUES = "phalanx.run-hues";
const KEPT_HUES = 2000;
let hues = null;
function storedHues() {
  if (hues === null) { try { hues = JSON.parse(localStorage.getItem(HUES) || "{}"); } catch { hues = {}; } }
  return hues;
}
window.addEventListener?.("storage", (ev) => { if (ev.key === HUES) hues = null; });
const hashHue = (id) => (hashId(id) % 36000) / 100;
const hueGap = (a, b) => { const d = Math.abs(a - b) % 360; return Math.min(d, 360 - d); };

// Runs drawn together get hues at least min(40°, 180°/n) apart, as far as they can be: each keeps its
// hue (the one it was given before, else its hashed one) unless that is too close to one already
// taken, and then takes the middle of the widest free arc. Runs given a hue before go first, so
// they keep it.
export function assignRunColours(ids) {
  const stored = { ...storedHues() };
  const unique = [...new Set(ids)];
  const order = [...unique.filter((id) => id in stored), ...unique.filter((id) => !(id in stored))];
  const minGap = Math.min(40, 180 / Math.max(1, unique.length));
  const taken = [];
  for (const id of order) {
    let hue = stored[id] ?? hashHue(id);
    if (taken.some((t) => hueGap(t, hue) < minGap)) hue = widestArcMiddle(taken);
    taken.push(hue);
    delete stored[id];
    stored[id] = Number(hue.toFixed(2)); // newest last: the oldest are dropped past KEPT_HUES
  }
  const keys = Object.keys(stored);
  for (const k of keys.slice(0, Math.max(0, keys.length - KEPT_HUES))) delete stored[k];
  hues = stored;
  try { localStorage.setItem(HUES, JSON.stringify(stored)); } catch { /* private mode: this page only */ }
}

function widestArcMiddle(taken) {
  const sorted = [...taken].sort((a, b) => a - b);
  let best = 0, at = 0;
  sorted.forEach((h0, i) => {
    const h1 = i + 1 < sorted.length ? sorted[i + 1] : sorted[0] + 360;
    if (h1 - h0 > best) { best = h1 - h0; at = (h0 + (h1 - h0) / 2) % 360; }
  });
  return at;
}

export function runColor(id, i = 0, n = 1) {
  const x = hashId(id);
  // shades of the run's colour, told apart by hue and lightness both: lightness alone made two
  // ranks near-identical blues. Up to ±15° of hue (half the 40° between runs drawn together) and
  // darker to lighter, centred on the run's own colour
  const spread = n <= 1 ? 0 : (2 * i) / (n - 1) - 1; // -1 .. 1
  const hue = ((((storedHues()[id] ?? hashHue(id)) + 15 * spread) % 360) + 360) % 360;
  const sat = 62 + ((x >>> 16) % 4) * 8; // 62..86
  // lighter in the dark theme, so the darkest shade still stands out from the page
  const dark = window.matchMedia?.("(prefers-color-scheme: dark)").matches;
  const base = [38, 47, 56][(x >>> 20) % 3] + (dark ? 14 : 0);
  const light = Math.round(base + 16 * spread);
  return `hsl(${hue.toFixed(2)}, ${sat}%, ${Math.max(22, Math.min(dark ? 82 : 72, light))}%)`;
}

export function replicaOrder(name) {
  const m = /^(master|worker|ps)(?:-(\d+))?$/.exec(name || "");
  if (!m) return [9, 0, name];
  return [{ master: 0, worker: 1, ps: 2 }[m[1]], Number(m[2] || 0), name];
}
export function byReplica(a, b) {
  const x = replicaOrder(a);
  const y = replicaOrder(b);
  return x[0] - y[0] || x[1] - y[1] || String(x[2]).localeCompare(String(y[2]));
}
