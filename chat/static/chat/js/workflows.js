// The workflow list: deploy and reset.

import { api } from "./api.js";
import { confirmAction } from "./dom.js";

export function workflowsPage(root) {
  const status = document.getElementById("workflows-status");
  root.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    const { action, workflow } = button.dataset;
    if (action === "reset") {
      const ok = await confirmAction({
        title: "Reset this workflow?",
        text: "The live generation ends: its agents' Context is archived and the chat closes. Memory stays. Deploy again to start a new generation.",
        ok: "Reset",
      });
      if (!ok) return;
    }
    button.disabled = true;
    status.textContent = action === "deploy" ? "Deploying…" : "Resetting…";
    try {
      const result = await api("POST", `/api/v1/workflows/${encodeURIComponent(workflow)}/${action}`);
      status.textContent = `${action === "deploy" ? "Deployed" : "Reset"}: generation ${result.generation}, ${result.state}.`;
      setTimeout(() => location.reload(), 600);
    } catch (error) {
      status.textContent = error.message || "That did not work.";
      button.disabled = false;
    }
  });
}
