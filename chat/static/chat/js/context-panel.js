// The Notes and Context panels; both read the conversations list.

import { api } from "./api.js";
import { confirmAction, debounce, formatBytes, h } from "./dom.js";

function messageText(message) {
  const parts = (message.content || []).map((block) => {
    if (block.type === "text") return block.text;
    if (block.type === "tool_call") return `[calls ${block.name}]`;
    if (block.type === "tool_result") return `[${block.name} result]`;
    return `[${block.type}]`;
  });
  const text = parts.join(" ").replace(/\s+/g, " ").trim();
  return text.length > 200 ? `${text.slice(0, 199)}…` : text;
}

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
      const query = new URLSearchParams({ agent_node_id: page.agentId, limit: "1" });
      if (page.generation > 0) query.set("generation", String(page.generation));
      rows = (await api("GET", `${page.apiBase}/conversations?${query}`)).results;
    } catch {
      return;
    }
    const row = rows.find((r) => r.agent_node_id === page.agentId && r.generation === page.generation) || null;
    this.renderNotes(row ? row.notes || [] : []);
    this.renderContext(row);
    if (this.page.hasContext) await Promise.all([this.loadUsage(), this.loadTurns(), this.loadFidelity()]);
  }

  // The conversation's badge: its runtime and the lowest fidelity among the turns it holds.
  async loadFidelity() {
    const page = this.page;
    let detail;
    try {
      const query = `generation=${page.generation}&limit=1`;
      detail = await api("GET", `${page.apiBase}/conversations/${encodeURIComponent(page.agentId)}?${query}`);
    } catch {
      return;
    }
    const badge = detail.fidelity;
    document.getElementById("ctx-fidelity").textContent =
      badge && badge.fidelity ? `${badge.runtime || "unknown"} · ${badge.fidelity}` : "none yet";
  }

  async loadUsage() {
    const page = this.page;
    let usage;
    try {
      usage = await api("GET", `${page.apiBase}/usage?agent_node_id=${encodeURIComponent(page.agentId)}`);
    } catch {
      return;
    }
    const set = (id, value) => {
      document.getElementById(id).textContent = value;
    };
    set("ctx-life-calls", usage.calls.toLocaleString());
    set("ctx-life-input", usage.input_tokens.toLocaleString());
    set("ctx-life-cached", usage.cached_tokens.toLocaleString());
    set("ctx-life-output", usage.output_tokens.toLocaleString());
    set("ctx-life-cost", `$${Number(usage.cost).toFixed(4)}${usage.cost_complete ? "" : " (some models unpriced)"}`);
  }

  // The agent's recent requests (one per provider call): runtime · fidelity, tokens, and on demand
  // what the agent saw (the record's digests and the messages it sent, while still stored).
  async loadTurns() {
    const page = this.page;
    const base = `${page.apiBase}/conversations/${encodeURIComponent(page.agentId)}/requests`;
    let records = [];
    try {
      records = (await api("GET", `${base}?generation=${page.generation}&limit=10`)).results;
    } catch {
      return;
    }
    const list = document.getElementById("ctx-turns");
    list.replaceChildren(...records.map((record) => this.renderTurn(record, base)));
    document.getElementById("ctx-turns-empty").hidden = records.length > 0;
  }

  renderTurn(record, base) {
    const label = record.kind === "compaction" ? "compaction" : `${record.runtime || record.provider} · ${record.fidelity || "not recorded"}`;
    const tokens = record.usage_reported
      ? `in ${record.input_tokens.toLocaleString()} · out ${record.output_tokens.toLocaleString()}`
      : "usage not reported";
    const saw = h("div", { class: "ctx-saw" });
    const details = h(
      "details",
      { class: "ctx-turn-details" },
      h("summary", { text: "What the agent saw" }),
      saw,
    );
    details.addEventListener("toggle", async () => {
      if (!details.open || saw.childElementCount) return;
      let detail;
      try {
        detail = await api("GET", `${base}/${record.id}?generation=${this.page.generation}`);
      } catch (error) {
        saw.replaceChildren(h("p", { class: "muted", text: error.message || "Not available." }));
        return;
      }
      const short = (digest) => (digest ? digest.slice(0, 12) : "none");
      const facts = h(
        "dl",
        { class: "stats" },
        h("div", {}, h("dt", { text: "Model" }), h("dd", { text: `${detail.provider}/${detail.model}` })),
        h("div", {}, h("dt", { text: "Messages sent" }), h("dd", { text: `${detail.message_start}–${detail.message_end}` })),
        h("div", {}, h("dt", { text: "System prompt" }), h("dd", { text: short(detail.system_digest) })),
        h("div", {}, h("dt", { text: "Notes block" }), h("dd", { text: short(detail.notes_digest) })),
        h("div", {}, h("dt", { text: "Tools" }), h("dd", { text: short(detail.tools_digest) })),
      );
      const messages =
        detail.messages === null
          ? h("p", { class: "muted", text: "These messages are no longer stored (cleared, compacted or moved)." })
          : h(
              "ol",
              { class: "ctx-saw-messages" },
              ...detail.messages.map((m) => h("li", { "data-role": m.role, text: `${m.role}: ${messageText(m)}` })),
            );
      saw.replaceChildren(facts, messages);
    });
    return h(
      "li",
      { class: "ctx-turn", "data-request-id": String(record.id), "data-kind": record.kind },
      h("span", { class: "ctx-turn-label", text: label }),
      h("span", { class: "ctx-turn-tokens muted", text: ` ${tokens}` }),
      details,
    );
  }

  renderNotes(notes) {
    const list = document.getElementById("notes-list");
    list.replaceChildren(...notes.map((note) => h("li", { class: "note", "data-note-id": note.id, text: note.text })));
    document.getElementById("notes-empty").hidden = notes.length > 0;
    document.getElementById("notes-count").textContent = String(notes.length);
  }

  // Pressure is the stored head's: the last request's input plus its output headroom, against the
  // window of the model it went to. It changes when a request ends, never while one streams.
  renderContext(row) {
    if (!this.page.hasContext) return;
    const length = row ? row.length : 0;
    const tokens = row ? row.last_input_tokens : 0;
    const pressure = row ? row.pressure_tokens : 0;
    const window = (row && row.context_window) || this.page.window;
    document.getElementById("ctx-messages").textContent = String(length);
    document.getElementById("ctx-bytes").textContent = formatBytes(row ? row.bytes : 0);
    document.getElementById("ctx-tokens").textContent = tokens.toLocaleString();
    document.getElementById("ctx-headroom").textContent = (row ? row.pressure_headroom_tokens : 0).toLocaleString();
    document.getElementById("context-count").textContent = String(length);
    const meter = document.getElementById("ctx-pressure");
    meter.max = window;
    meter.low = Math.round(window * 0.6);
    meter.high = Math.round(window * 0.8);
    meter.optimum = 0;
    meter.value = Math.min(pressure, window);
    const percent = window ? (pressure / window) * 100 : 0;
    const shown = percent > 0 && percent < 1 ? "<1" : String(Math.round(percent));
    const estimated = row && row.pressure_estimated ? " (estimated)" : "";
    document.getElementById("ctx-pressure-text").textContent = `${shown}% of ${window.toLocaleString()} tokens${estimated}`;
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
