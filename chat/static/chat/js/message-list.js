// The chat's message list: keyed rendering of the items the state lists (chat-state.js `items()`).
//
// Each item keeps its element across renders and is drawn again only when what it shows changed (its
// signature); an answer streaming in touches its own element only. Whether an answer is running changes
// the disabled state of a few buttons in place rather than redrawing the messages that hold them.

import { h, icon, timeNode } from "./dom.js";
import { renderBody, renderText } from "./render.js";

// Buttons an answer in progress disables (edit, retry, versions, save); `data-edge` marks a version
// arrow that is disabled anyway (no version beyond it).
const IDLE_ONLY = "data-idle-only";

function statusNote(status, error) {
  if (status === "stopped") {
    return h("p", { class: "status-note status-stopped", text: error?.message ? `Stopped: ${error.message}` : "Stopped" });
  }
  if (status === "error") {
    return h("p", { class: "status-note status-error", role: "note", text: `Error: ${error?.message || "the answer failed."}` });
  }
  return null;
}

export class MessageList {
  // actions: {startEdit(message), cancelEdit(message), editText(text), saveEdit(messageId), feedback(message, value),
  // retry(message), switchTo(targetId, key)}
  constructor({ container, scroller, empty, earlier, actions }) {
    this.container = container;
    this.scroller = scroller;
    this.empty = empty;
    this.earlier = earlier;
    this.actions = actions;
    this.entries = new Map(); // key → {node, sig, parts}
    this.anchor = null; // {id, focusKey}: keep this message in view after the next render
    this.drafting = new Map(); // runs whose streamed text waits for the next animation frame
    this.draftFrame = null;
  }

  nearBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  }

  // items: from the state (or an archived chat's path); view: {editing, liveBusy, readOnly, hasMore}.
  render(items, view, { stick = false, keepScroll = false, top = false } = {}) {
    const scroller = this.scroller;
    const wasNearBottom = this.nearBottom();
    const scrollTop = scroller.scrollTop;
    const focusKey = this.anchor?.focusKey || document.activeElement?.dataset?.focusKey;

    this.reconcile(items, view);
    this.setIdle(!view.liveBusy);
    if (this.empty) this.empty.hidden = items.length > 0 || view.readOnly;
    if (this.earlier) this.earlier.hidden = !view.hasMore || view.readOnly;

    const editArea = view.editing ? this.container.querySelector(".edit-input") : null;
    let again = focusKey ? this.container.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`) : null;
    // the last version's "next" arrow is disabled: focus stays in the switcher on the other arrow
    if (again?.disabled) again = again.closest(".versions")?.querySelector("button:not(:disabled)") || null;
    if (again) {
      if (document.activeElement !== again) again.focus({ preventScroll: true });
    } else if (editArea && (focusKey || document.activeElement === document.body)) editArea.focus();
    const anchored = this.anchor ? this.container.querySelector(`[data-id="${CSS.escape(this.anchor.id)}"]`) : null;
    if (anchored) {
      // A version switch keeps the switched message where the owner is looking.
      scroller.scrollTop = scrollTop;
      anchored.scrollIntoView({ block: "nearest" });
      this.anchor = null;
    } else if (top) scroller.scrollTop = 0;
    else if (stick || (wasNearBottom && !keepScroll)) scroller.scrollTop = scroller.scrollHeight;
    else scroller.scrollTop = scrollTop;
  }

  // Keep each key's element when its signature is unchanged, patch or rebuild the others, and move
  // elements only where the order changed.
  reconcile(items, view) {
    const next = new Map();
    const nodes = [];
    for (const item of items) {
      const kind = KINDS[item.kind];
      const parts = kind.signature(item, view);
      const sig = parts.join("\u0000");
      let entry = this.entries.get(item.key);
      if (!entry) entry = { node: kind.build.call(this, item, view), sig, parts };
      else if (entry.sig !== sig) {
        const patched = kind.patch ? kind.patch.call(this, entry, item, view, parts) : null;
        entry = { node: patched || kind.build.call(this, item, view), sig, parts };
      }
      next.set(item.key, entry);
      nodes.push(entry.node);
    }
    const kept = new Set(nodes);
    for (const entry of this.entries.values()) if (!kept.has(entry.node)) entry.node.remove();
    let cursor = this.container.firstChild;
    for (const node of nodes) {
      if (node === cursor) cursor = cursor.nextSibling;
      else this.container.insertBefore(node, cursor);
    }
    while (cursor) {
      const after = cursor.nextSibling;
      cursor.remove();
      cursor = after;
    }
    this.entries = next;
  }

  setIdle(idle) {
    for (const button of this.container.querySelectorAll(`[${IDLE_ONLY}]`)) {
      const disabled = !idle || button.hasAttribute("data-edge");
      if (button.disabled !== disabled) button.disabled = disabled;
    }
  }

  // --- streaming drafts: drawn at most once per frame ---

  // The Markdown of the whole answer so far is rendered again each time, so a half-written table or
  // code block settles as the rest arrives. `draw` redraws the list when the draft has no element yet.
  paintDraftSoon(run, draw) {
    this.drafting.set(run.id, run);
    if (this.draftFrame) return;
    this.draftFrame = requestAnimationFrame(() => {
      this.draftFrame = null;
      const runs = [...this.drafting.values()];
      this.drafting.clear();
      for (const current of runs) {
        const entry = this.entries.get(`run:${current.id}`);
        if (!entry) {
          draw();
          continue;
        }
        const stick = this.nearBottom();
        const item = { key: `run:${current.id}`, kind: "draft", run: current };
        const parts = KINDS.draft.signature(item);
        if (entry.sig !== parts.join("\u0000")) {
          KINDS.draft.patch.call(this, entry, item);
          entry.parts = parts;
          entry.sig = parts.join("\u0000");
        }
        if (stick) this.scroller.scrollTop = this.scroller.scrollHeight;
      }
    });
  }

  // --- item builders ---

  buildMessage({ message, isLast }, view) {
    const isUser = message.role === "user";
    const item = h("li", {
      class: `msg ${isUser ? "msg-user" : "msg-assistant"} is-${message.status}`,
      "data-id": message.id,
      "data-role": message.role,
      "data-status": message.status,
    });
    item.append(h("div", { class: "msg-role visually-hidden", text: isUser ? "You" : "Agent" }));
    if (view.editing && view.editing.id === message.id) {
      item.append(this.buildEditor(message, view));
      return item;
    }
    const bubble = h("div", { class: "bubble" }, h("div", { class: "msg-text" }, renderBody(message)));
    const note = isUser ? null : statusNote(message.status, message.error);
    if (note) bubble.append(note);
    item.append(bubble, ...this.buildMessageTools(message, isLast, view));
    return item;
  }

  // What follows the bubble: the run note under the last question and the tools row.
  buildMessageTools(message, isLast, view) {
    const isUser = message.role === "user";
    const readOnly = Boolean(view.readOnly);
    const tools = h("div", { class: "msg-tools" });
    if (message.versions && message.versions.count > 1) tools.append(this.buildVersions(message, readOnly));
    if (readOnly) {
      if (message.feedback) {
        tools.append(
          h("span", { class: "rated" }, icon(message.feedback), message.feedback === "up" ? "Rated good" : "Rated bad"),
        );
      }
      if (message.created_at) tools.append(timeNode(message.created_at, "when msg-time"));
      return [tools];
    }
    const busy = Boolean(view.liveBusy);
    if (isUser && message.editable) {
      tools.append(
        h("button", {
          type: "button",
          class: "tool",
          text: "Edit",
          "aria-label": "Edit this message",
          "data-focus-key": `edit:${message.id}`,
          [IDLE_ONLY]: true,
          disabled: busy,
          onclick: () => this.actions.startEdit(message),
        }),
      );
    }
    if (!isUser) {
      for (const [value, label] of [
        ["up", "Good answer"],
        ["down", "Bad answer"],
      ]) {
        tools.append(
          h(
            "button",
            {
              type: "button",
              class: "tool tool-icon",
              "aria-label": label,
              "aria-pressed": String(message.feedback === value),
              "data-focus-key": `${value}:${message.id}`,
              onclick: () => this.actions.feedback(message, value),
            },
            icon(value),
          ),
        );
      }
    }
    if (isLast && message.editable && (!isUser || message.run_state)) {
      tools.append(
        h("button", {
          type: "button",
          class: "tool",
          text: isUser ? "Answer again" : "Retry",
          "aria-label": isUser ? "Ask for an answer again" : "Retry this answer",
          "data-focus-key": `retry:${message.id}`,
          [IDLE_ONLY]: true,
          disabled: busy,
          onclick: () => this.actions.retry(message),
        }),
      );
    }
    if (message.created_at) tools.append(timeNode(message.created_at, "when msg-time"));
    const parts = [];
    if (isUser && isLast && !busy && ["stopped", "error"].includes(message.run_state)) {
      const text = message.run_state === "stopped" ? "Stopped before an answer." : "No answer: the run failed.";
      parts.push(h("p", { class: "status-note status-stopped run-note", text }));
    }
    if (tools.childElementCount) parts.push(tools);
    return parts;
  }

  buildVersions(message, readOnly = false) {
    const { index, count, ids } = message.versions;
    if (readOnly) {
      return h("span", { class: "versions versions-label", text: `Version ${index} of ${count}` });
    }
    const arrow = (key, text, label, target) =>
      h("button", {
        type: "button",
        class: "tool tool-arrow",
        text,
        "aria-label": label,
        "data-focus-key": `${key}:${message.id}`,
        [IDLE_ONLY]: true,
        "data-edge": !target,
        disabled: !target,
        // Keep the switched message in view, and focus on the same arrow of its new version.
        onclick: () => this.actions.switchTo(target, key),
      });
    return h(
      "div",
      { class: "versions", role: "group", "aria-label": "Versions" },
      arrow("prev", "‹", "Previous version", index > 1 ? ids[index - 2] : null),
      h("span", { class: "versions-label", "aria-label": `Version ${index} of ${count}`, text: `${index}/${count}` }),
      arrow("next", "›", "Next version", index < count ? ids[index] : null),
    );
  }

  buildEditor(message, view) {
    const area = h("textarea", { class: "edit-input input", rows: "3", "aria-label": "Edit your message" });
    area.value = view.editing.text;
    area.addEventListener("input", () => this.actions.editText(area.value));
    const cancel = () => this.actions.cancelEdit(message);
    area.addEventListener("keydown", (event) => {
      if (event.key === "Escape") cancel();
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.actions.saveEdit(message.id);
      }
    });
    return h(
      "form",
      {
        class: "editor",
        onsubmit: (event) => {
          event.preventDefault();
          this.actions.saveEdit(message.id);
        },
      },
      area,
      h(
        "div",
        { class: "editor-actions" },
        h("button", { type: "button", class: "button", text: "Cancel", onclick: cancel }),
        h("button", {
          type: "submit",
          class: "button button-primary",
          text: "Save",
          [IDLE_ONLY]: true,
          disabled: Boolean(view.liveBusy),
        }),
      ),
    );
  }

  buildDraft({ run }) {
    const live = run.state === "live";
    const body = h("div", {
      class: "msg-text",
      id: `draft-${run.id}`,
      "aria-live": "polite",
      "aria-busy": live ? "true" : "false",
    });
    this.fillDraft(body, run);
    return h(
      "li",
      { class: this.draftClass(run), "data-run": run.id, "data-state": run.state },
      h("div", { class: "msg-role visually-hidden", text: "Agent" }),
      h("div", { class: "bubble" }, this.buildSteps(run), body, statusNote(live ? "" : run.state, run.error)),
    );
  }

  draftClass(run) {
    return ["msg", "msg-assistant", run.state === "live" ? "is-streaming" : `is-${run.state}`].join(" ");
  }

  fillDraft(body, run) {
    if (run.text) body.replaceChildren(renderText(run.text, { cache: run.state !== "live" }));
    else if (run.state === "live") body.replaceChildren(h("span", { class: "thinking", text: "Thinking…" }));
    else body.replaceChildren();
  }

  buildSteps(run) {
    if (!run.steps.length) return null;
    return h(
      "ul",
      { class: "steps", "aria-label": "Tool steps" },
      run.steps.map((step) => h("li", { class: `step step-${step.state}`, text: `${step.name} · ${step.state}` })),
    );
  }

  // A draft is updated inside the same live region, so assistive technology follows one growing answer;
  // only the parts that changed are replaced.
  patchDraft(entry, { run }) {
    const node = entry.node;
    const [state, text, steps, error] = KINDS.draft.signature({ run });
    const [oldState, oldText, oldSteps, oldError] = entry.parts;
    const body = node.querySelector(".msg-text");
    if (text !== oldText || state !== oldState) this.fillDraft(body, run);
    if (steps !== oldSteps) {
      node.querySelector(".steps")?.remove();
      const fresh = this.buildSteps(run);
      if (fresh) node.querySelector(".bubble").prepend(fresh);
    }
    if (state !== oldState || error !== oldError) {
      const live = run.state === "live";
      node.className = this.draftClass(run);
      node.dataset.state = run.state;
      body.setAttribute("aria-busy", live ? "true" : "false");
      node.querySelector(".status-note")?.remove();
      const note = statusNote(live ? "" : run.state, run.error);
      if (note) node.querySelector(".bubble").append(note);
    }
    return node;
  }

  buildMark({ mark }) {
    // Where the agent's Context was cleared or compacted (from the stored rows the thread frame lists).
    const text = mark.kind === "context_cleared" ? "Context cleared" : "Earlier messages summarized";
    return h("li", { class: "msg-mark", role: "separator", "data-mark": mark.kind }, h("span", { text }));
  }

  buildPending({ text }) {
    return h(
      "li",
      { class: "msg msg-user is-pending" },
      h("div", { class: "msg-role visually-hidden", text: "You" }),
      h("div", { class: "bubble" }, h("div", { class: "msg-text" }, renderText(text, { cache: false }))),
      h("div", { class: "msg-meta muted", text: "Sending…" }),
    );
  }

  // A message whose body is unchanged keeps its bubble (and its rendered Markdown); only the note and
  // tools after it are rebuilt.
  patchMessage(entry, item, view, parts) {
    if (entry.parts[0] !== parts[0]) return null;
    const node = entry.node;
    const bubble = node.querySelector(":scope > .bubble");
    if (!bubble) return null;
    while (bubble.nextSibling) bubble.nextSibling.remove();
    node.append(...this.buildMessageTools(item.message, item.isLast, view));
    return node;
  }
}

// Per kind: its signature parts (equal parts: nothing to redraw), how to build it and, optionally,
// how to update an existing element in place (returns null to rebuild instead).
const KINDS = {
  message: {
    signature({ message, isLast }, view) {
      const editing = Boolean(view.editing && view.editing.id === message.id);
      const readOnly = Boolean(view.readOnly);
      const body = JSON.stringify([message.role, message.kind, message.status, message.text, message.error, editing]);
      // whether an answer runs shows in the last question's note; buttons follow it in place (setIdle)
      const busyHere = isLast && message.role === "user" && Boolean(view.liveBusy);
      const tools = JSON.stringify([
        message.versions,
        message.feedback,
        message.editable,
        message.run_state,
        message.created_at,
        isLast,
        readOnly,
        busyHere,
      ]);
      return [body, tools];
    },
    build: MessageList.prototype.buildMessage,
    patch: MessageList.prototype.patchMessage,
  },
  draft: {
    signature({ run }) {
      return [run.state, run.text, JSON.stringify(run.steps), JSON.stringify(run.error)];
    },
    build: MessageList.prototype.buildDraft,
    patch: MessageList.prototype.patchDraft,
  },
  mark: {
    signature({ mark }) {
      return [mark.kind];
    },
    build: MessageList.prototype.buildMark,
  },
  pending: {
    signature({ text }) {
      return [text];
    },
    build: MessageList.prototype.buildPending,
  },
};
