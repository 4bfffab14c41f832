// The Notes and Context panels; both read the conversations list.

import { api } from "./api.js";
import { confirmAction, debounce, formatBytes, h } from "./dom.js";

export class ContextPanel {
  constructor(page) {
    this.page = page;
    this.refresh = debounce(() => this.load(), 120);
    this.generation = page.generation;
  }

  setGeneration(generation) {
    this.generation = generation;
    const node = document.getElementById("ctx-generation");
    if (node) node.textContent = String(generation);
  }

  async load() {
    const page = this.page;
    if (!page.agentId) return;
    let rows = [];
    try {
      rows = await api("GET", `${page.apiBase}/conversations`);
    } catch {
      return;
    }
    const row = rows.find((r) => r.agent_node_id === page.agentId && r.generation === page.generation) || null;
    this.renderNotes(row ? row.notes || [] : []);
    this.renderContext(row);
  }

  renderNotes(notes) {
    const list = document.getElementById("notes-list");
    list.replaceChildren(...notes.map((note) => h("li", { class: "note", "data-note-id": note.id, text: note.text })));
    document.getElementById("notes-empty").hidden = notes.length > 0;
    document.getElementById("notes-count").textContent = String(notes.length);
  }

  renderContext(row) {
    if (!this.page.hasContext) return;
    const length = row ? row.length : 0;
    const tokens = row && length > 0 ? row.last_input_tokens : 0;
    const window = this.page.window;
    document.getElementById("ctx-messages").textContent = String(length);
    document.getElementById("ctx-bytes").textContent = formatBytes(row ? row.bytes : 0);
    document.getElementById("ctx-tokens").textContent = tokens.toLocaleString();
    document.getElementById("context-count").textContent = String(length);
    const meter = document.getElementById("ctx-pressure");
    meter.max = window;
    meter.low = Math.round(window * 0.6);
    meter.high = Math.round(window * 0.8);
    meter.optimum = 0;
    meter.value = Math.min(tokens, window);
    const percent = window ? (tokens / window) * 100 : 0;
    const shown = percent > 0 && percent < 1 ? "<1" : String(Math.round(percent));
    document.getElementById("ctx-pressure-text").textContent = `${shown}% of ${window.toLocaleString()} tokens`;
  }

  bind() {
    const button = document.getElementById("context-clear");
    if (!button) return;
    button.addEventListener("click", async () => {
      const ok = await confirmAction({
        title: "Clear the agent's Context?",
        text: "The agent forgets this conversation and its working notes for this generation (they are archived). The chat history and Memory stay.",
        ok: "Clear Context",
      });
      if (!ok) return;
      try {
        await api("DELETE", `${this.page.apiBase}/conversations/${encodeURIComponent(this.page.agentId)}`);
        this.page.announce("Context cleared.");
      } catch (error) {
        this.page.announce(error.message || "Context was not cleared.", true);
      }
      this.load();
    });
  }
}
