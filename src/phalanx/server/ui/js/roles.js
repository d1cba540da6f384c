// What the signed-in user may do, from GET /api/v1/me ({user, admin, projects: {name: role}}), so a
// page offers only the actions the server would allow (it still checks every request): a viewer
// sees no Stop, Delete, Run again or Save. Asked once per page load.

import { api } from "./api.js";

const RANK = { viewer: 1, editor: 2, admin: 3 };
let asked = null;

// {user, admin, projects}; a server that cannot say (an older one) is taken as allowing everything
export function whoAmI() {
  if (!asked) asked = api.me().catch(() => ({ user: null, admin: true, projects: {} }));
  return asked;
}

// may `me` act with `role` (viewer, editor, admin) in `project`?
export function may(me, project, role) {
  if (me.admin) return true;
  return (RANK[(me.projects || {})[project]] || 0) >= RANK[role];
}
