// The Memory panel: search, edit, forget and clear through the Memory API. Search results say how
// they matched and mark the words that matched.

import { api } from "./api.js";
import { confirmAction, debounce, formatWhen, h } from "./dom.js";

const MATCH_LABELS = {
  all: "all words",
  some: "some words",
  fuzzy: "close match",
  recent: "recent",
  similar: "similar meaning",
};

// The text as nodes, with each whole-word occurrence of `words` (lower-cased) in a <mark>.
function marked(text, words) {
  if (!words || !words.length) return [text];
  const escaped = words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const pattern = new RegExp(`(?<![\\p{L}\\p{N}])(${escaped.join("|")})(?![\\p{L}\\p{N}])`, "giu");
  const nodes = [];
  let last = 0;
  for (const found of text.matchAll(pattern)) {
    if (found.index > last) nodes.push(text.slice(last, found.index));
    nodes.push(h("mark", { class: "memory-hit", text: found[0] }));
    last = found.index + found[0].length;
  }
  if (last < text.length) nodes.push(text.slice(last));
  return nodes;
}

export class MemoryPanel {
  constructor(page) {
    this.page = page;
    this.items = [];
    this.editing = new Map(); // memory id → {text, version, conflict}
    this.query = "";
    this.refreshSoon = debounce(() => this.refresh(), 120);
    this.list = document.getElementById("memory-list");
    this.status = document.getElementById("memory-status");
    this.count = document.getElementById("memory-count");
  }

  get base() {
    return `${this.page.apiBase}/memory/${encodeURIComponent(this.page.memoryId)}`;
  }

  start() {
    if (!this.page.memoryId || !this.list) {
      if (this.count) this.count.textContent = "–";
      return;
    }
    document.getElementById("memory-search").addEventListener("submit", (event) => {
      event.preventDefault();
      this.query = document.getElementById("memory-query").value.trim();
      this.refresh();
    });
    document.getElementById("memory-query").addEventListener("search", (event) => {
      if (!event.target.value) {
        this.query = "";
        this.refresh();
      }
    });
    document.getElementById("memory-clear").addEventListener("click", () => this.clearAll());
    this.refresh();
  }

  async refresh() {
    if (!this.page.memoryId) return;
    const params = new URLSearchParams({ limit: "50" });
    if (this.query) params.set("query", this.query);
    try {
      const page = await api("GET", `${this.base}/items?${params}`);
      this.items = page.results || [];
      const n = this.items.length;
      this.status.textContent = !this.query
        ? n
          ? ""
          : "Nothing remembered yet. Ask “remember that …”."
        : page.retrieval === "recent"
          ? `“${this.query}” has no words to search for: the ${n} most recent item${n === 1 ? "" : "s"}.`
          : `${n} match${n === 1 ? "" : "es"} for “${this.query}”${page.degraded ? " (keyword search only)" : ""}.`;
      this.render();
    } catch (error) {
      this.status.textContent = error.message || "Memory could not be loaded.";
    }
  }

  render() {
    const focusKey = document.activeElement?.dataset?.focusKey;
    const focusValue = document.activeElement?.classList?.contains("memory-edit-input") ? document.activeElement : null;
    if (!this.query) this.count.textContent = String(this.items.length);
    const nodes = this.items.map((item) => this.renderItem(item));
    // an item being edited stays on screen even when a refetch no longer lists it
    for (const [id, edit] of this.editing) {
      if (!this.items.some((i) => i.id === id)) nodes.push(this.renderItem({ ...edit.item, version: edit.version }));
    }
    this.list.replaceChildren(...nodes);
    if (focusKey) this.list.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`)?.focus();
    else if (focusValue) this.list.querySelector(".memory-edit-input")?.focus();
  }

  renderItem(item) {
    const edit = this.editing.get(item.id);
    const li = h("li", { class: "memory-item", "data-memory-id": item.id });
    if (edit) {
      const area = h("textarea", { class: "input memory-edit-input", rows: "3", "aria-label": "Memory content" });
      area.value = edit.text;
      area.addEventListener("input", () => {
        edit.text = area.value;
      });
      const form = h(
        "form",
        {
          class: "editor",
          onsubmit: (event) => {
            event.preventDefault();
            this.save(item.id);
          },
        },
        area,
        edit.conflict
          ? h(
              "p",
              { class: "conflict", role: "alert" },
              "Changed elsewhere — reload",
              " ",
              h("button", { type: "button", class: "button button-small", text: "Reload", onclick: () => this.reload(item.id) }),
            )
          : null,
        h(
          "div",
          { class: "editor-actions" },
          h("button", {
            type: "button",
            class: "button",
            text: "Cancel",
            onclick: () => {
              this.editing.delete(item.id);
              this.render();
              this.list.querySelector(`[data-focus-key="medit:${CSS.escape(item.id)}"]`)?.focus();
            },
          }),
          h("button", { type: "submit", class: "button button-primary", text: "Save" }),
        ),
      );
      li.append(form);
      return li;
    }
    const words = item.highlight || [];
    if (item.title) li.append(h("p", { class: "memory-title" }, ...marked(item.title, words)));
    li.append(h("p", { class: "memory-content" }, ...marked(item.content, words)));
    const meta = h("p", { class: "memory-meta" });
    if (item.match) {
      const matched = item.matched && item.matched.length ? `Matched: ${item.matched.join(", ")}` : null;
      meta.append(h("span", { class: "chip chip-match", "data-match": item.match, title: matched, text: MATCH_LABELS[item.match] || item.match }));
    }
    meta.append(h("span", { class: "chip chip-category", text: item.category || "uncategorized" }));
    for (const tag of item.tags || []) meta.append(h("span", { class: "chip", text: `#${tag}` }));
    meta.append(h("span", { class: "muted", text: item.expires_at ? `expires ${formatWhen(item.expires_at)}` : "no expiry" }));
    meta.append(h("span", { class: "muted", text: `v${item.version}` }));
    li.append(meta);
    li.append(
      h(
        "div",
        { class: "memory-actions" },
        h("button", {
          type: "button",
          class: "tool",
          text: "Edit",
          "aria-label": `Edit memory: ${item.title || item.content.slice(0, 40)}`,
          "data-focus-key": `medit:${item.id}`,
          onclick: () => {
            this.editing.set(item.id, { text: item.content, version: item.version, conflict: false, item });
            this.render();
            this.list.querySelector(`[data-memory-id="${CSS.escape(item.id)}"] textarea`)?.focus();
          },
        }),
        h("button", {
          type: "button",
          class: "tool tool-danger",
          text: "Forget",
          "aria-label": `Forget memory: ${item.title || item.content.slice(0, 40)}`,
          "data-focus-key": `mforget:${item.id}`,
          onclick: () => this.forget(item),
        }),
      ),
    );
    return li;
  }

  async save(id) {
    const edit = this.editing.get(id);
    if (!edit) return;
    // an emptied text goes to the API too, which refuses it with its own message
    try {
      await api("PATCH", `${this.base}/items/${encodeURIComponent(id)}`, { expected_version: edit.version, content: edit.text });
      this.editing.delete(id);
      this.page.announce("Memory updated.");
      await this.refresh();
    } catch (error) {
      if (error.code === "version_conflict") {
        edit.conflict = true;
        this.render();
      } else {
        this.page.announce(error.message || "Memory was not saved.", true);
      }
    }
  }

  async reload(id) {
    try {
      const item = await api("GET", `${this.base}/items/${encodeURIComponent(id)}`);
      this.editing.set(id, { text: item.content, version: item.version, conflict: false, item });
      await this.refresh();
      this.list.querySelector(`[data-memory-id="${CSS.escape(id)}"] textarea`)?.focus();
    } catch (error) {
      this.editing.delete(id);
      this.page.announce(error.status === 404 ? "That memory was forgotten elsewhere." : error.message, true);
      await this.refresh();
    }
  }

  async forget(item) {
    const ok = await confirmAction({
      title: "Forget this memory?",
      text: `The agent will no longer recall: “${item.content.slice(0, 160)}”.`,
      ok: "Forget",
    });
    if (!ok) return;
    try {
      await api("DELETE", `${this.base}/items/${encodeURIComponent(item.id)}?expected_version=${item.version}`);
      this.page.announce("Forgotten.");
    } catch (error) {
      this.page.announce(error.code === "version_conflict" ? "Changed elsewhere — reload" : error.message, true);
    }
    await this.refresh();
  }

  async clearAll() {
    const ok = await confirmAction({
      title: "Clear all of Memory?",
      text: "Every item in this Memory is forgotten, for every chat and generation. This cannot be undone here.",
      ok: "Clear memory",
    });
    if (!ok) return;
    try {
      const result = await api("POST", `${this.base}/clear`, { confirm: true });
      this.editing.clear();
      this.page.announce(`Memory cleared (${result.cleared} item${result.cleared === 1 ? "" : "s"}).`);
    } catch (error) {
      this.page.announce(error.message || "Memory was not cleared.", true);
    }
    await this.refresh();
  }
}
