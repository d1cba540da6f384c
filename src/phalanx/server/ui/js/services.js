// Services started from a page (docs/services.md): the TensorBoard of this experiment or group,
// started on the server (or the one that runs) and opened at /services/ID/, behind the project's roles.

import { api } from "./api.js";
import { h } from "./util.js";

// target: {experiment: id} or {group: id}
export function tensorboardButton(target) {
  const button = h("button", { id: "tensorboard", title: "TensorBoard of what this reported (a viewer's right)", onclick: async () => {
    button.disabled = true;
    button.textContent = "Starting TensorBoard…";
    try {
      const service = await api.tensorboard(target);
      location.href = service.path;
    } catch (err) {
      alert(`Could not start TensorBoard: ${err.message}`);
      button.disabled = false;
      button.textContent = "TensorBoard";
    }
  } }, "TensorBoard");
  return button;
}
