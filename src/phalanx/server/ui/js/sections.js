// The Scalars tab's charts in collapsible sections, one per title prefix ("train/loss" and
// "train/acc" in "train", a title without "/" in "Charts"), and a search box that keeps only the
// charts whose title matches (a case-insensitive regular expression, or plain text when it is not
// one). A section with no match hides; which sections are folded is remembered in the browser.

import { add, plural, h } from "./util.js";

const FOLDED = "phalanx.folded-sections";

function folded() {
  try { return new Set(JSON.parse(localStorage.getItem(FOLDED) || "[]")); } catch { return new Set(); }
}

export function sectionOf(title) {
  const i = title.indexOf("/");
  return i > 0 ? title.slice(0, i) : "Charts";
}

export class ChartSections {
  // root: where the sections go (kept sorted by name, "Charts" first)
  constructor(root) {
    this.root = root;
    this.sections = new Map();
    this.pattern = null;
    this.count = h("span", { class: "muted small", id: "chart-count" });
    this.search = h("input", { type: "search", id: "chart-search", placeholder: "Search charts", "aria-label": "search charts",
      oninput: () => this.filter(this.search.value) });
  }

  // the search box and its "N of M charts", for the toolbar
  controls() { return h("span", { class: "chart-search" }, this.search, " ", this.count); }

  // the grid a chart of this title goes in (its section made on first use)
  gridFor(title) {
    const name = sectionOf(title);
    let s = this.sections.get(name);
    if (!s) {
      const grid = h("div", { class: "charts" });
      const details = h("details", { class: "chart-section", "data-section": name },
        h("summary", {}, h("h2", {}, name)), grid);
      details.open = !folded().has(name);
      details.addEventListener("toggle", () => {
        const f = folded();
        if (details.open) f.delete(name); else f.add(name);
        localStorage.setItem(FOLDED, JSON.stringify([...f]));
      });
      s = { details, grid };
      this.sections.set(name, s);
      const names = [...this.sections.keys()].sort((a, b) => (a === "Charts" ? -1 : b === "Charts" ? 1 : a.localeCompare(b)));
      const next = names[names.indexOf(name) + 1];
      if (next) this.root.insertBefore(details, this.sections.get(next).details); else add(this.root, details);
    }
    return s.grid;
  }

  // Keep the charts whose title matches `text` (every chart when empty); called again as charts come.
  filter(text = this.search.value) {
    const t = text.trim();
    let re = null;
    if (t) { try { re = new RegExp(t, "i"); } catch { re = null; } }
    const match = (title) => !t || (re ? re.test(title) : title.toLowerCase().includes(t.toLowerCase()));
    let shown = 0, all = 0;
    for (const { details, grid } of this.sections.values()) {
      let here = 0;
      for (const card of grid.querySelectorAll(".chart-card")) {
        const ok = match(card.dataset.title || "");
        card.hidden = !ok;
        all++; if (ok) { here++; shown++; }
      }
      details.hidden = !here;
      if (t && here) details.open = true; // a match inside a folded section shows
    }
    this.count.textContent = t ? `${shown} of ${plural(all, "chart")}` : "";
  }
}
