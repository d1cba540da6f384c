// The UI's entry point: picks the view from the path. Pages are /, /experiments/{id}, /compare,
// /groups[/{id}], /models[/{name}], /queue, /services, /alerts, /sweep, /datasets/{name}/versions/{version}.

import { renderAlerts } from "./alerts.js";
import { renderCompare } from "./compare.js";
import { renderDatasetVersion } from "./datasets.js";
import { renderExperiment } from "./experiment.js";
import { renderGroup, renderGroups } from "./groups.js";
import { renderList } from "./list.js";
import { renderModel, renderModels } from "./models.js";
import { renderQueue } from "./queue.js";
import { renderServices } from "./services.js";
import { renderSweep } from "./sweeps.js";

function route() {
  const root = document.getElementById("app");
  const path = location.pathname;
  const ctx = { alive: () => true };
  let nav = "experiments";
  const m = /^\/experiments\/([^/]+)\/?$/.exec(path);
  const g = /^\/groups\/([^/]+)\/?$/.exec(path);
  const md = /^\/models\/([^/]+)\/?$/.exec(path);
  const dv = /^\/datasets\/([^/]+)\/versions\/([^/]+)\/?$/.exec(path);
  if (m) renderExperiment(root, ctx, decodeURIComponent(m[1]));
  else if (dv) renderDatasetVersion(root, decodeURIComponent(dv[1]), decodeURIComponent(dv[2]));
  else if (g) { nav = "groups"; renderGroup(root, ctx, decodeURIComponent(g[1])); }
  else if (path === "/groups" || path === "/groups/") { nav = "groups"; renderGroups(root); }
  else if (md) { nav = "models"; renderModel(root, decodeURIComponent(md[1])); }
  else if (path === "/models" || path === "/models/") { nav = "models"; renderModels(root); }
  else if (path === "/compare" || path === "/compare/") { nav = "compare"; renderCompare(root, ctx); }
  else if (path === "/queue" || path === "/queue/") { nav = "queue"; renderQueue(root, ctx); }
  else if (path === "/services" || path === "/services/") { nav = "services"; renderServices(root, ctx); }
  else if (path === "/alerts" || path === "/alerts/") { nav = "alerts"; renderAlerts(root, ctx); }
  else if (path === "/sweep" || path === "/sweep/") renderSweep(root, ctx);
  else renderList(root, ctx);
  for (const a of document.querySelectorAll(".topbar nav a")) a.classList.toggle("active", a.dataset.nav === nav);
}

route();
