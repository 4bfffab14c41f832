// The chat page: the message path, versions, streaming runs, edit/retry/switch, feedback, the Chats
// sidebar with archived chats shown read-only, and the drawers narrow screens use.

import { api } from "./api.js";
import { ChatState, HISTORY_PAGE, MAX_MESSAGE_CHARS } from "./chat-state.js";
import { ChatList } from "./chats.js";
import { ContextPanel } from "./context-panel.js";
import { confirmAction, debounce, h, icon, refreshTimes, timeNode } from "./dom.js";
import { Drawers } from "./drawer.js";
import { MemoryPanel } from "./memory-panel.js";
import { renderBody, renderText } from "./render.js";
import { ChatSocket } from "./socket.js";

const COUNTER_FROM = 45000; // the character counter shows from here on

export class ChatPage {
  constructor(root) {
    this.root = root;
    this.workflowId = root.dataset.workflow;
    this.agentId = root.dataset.agent;
    this.memoryId = root.dataset.memory;
    this.window = Number(root.dataset.window) || 128000;
    this.hasContext = root.dataset.hasContext === "1";
    this.state = new ChatState({
      generation: root.dataset.generation,
      memoryId: this.memoryId,
      cannotAnswer: root.dataset.cannotAnswer,
    });
    this.apiBase = `/api/v1/workflows/${encodeURIComponent(this.workflowId)}`;

    this.editing = null; // {id, text}
    this.loadingEarlier = false;
    this.connState = "connecting";
    this.archived = null; // the transcript of the archived chat on screen, or null for the current chat
    this.anchor = null; // {id, focusKey}: keep this message in view after the next render
    this.drafting = new Set(); // runs whose streamed text waits for the next animation frame

    this.el = {
      scroller: document.getElementById("scroller"),
      messages: document.getElementById("messages"),
      empty: document.getElementById("empty"),
      earlier: document.getElementById("load-earlier"),
      banner: document.getElementById("banner"),
      conn: document.getElementById("conn"),
      announcer: document.getElementById("announcer"),
      composer: document.getElementById("composer"),
      input: document.getElementById("composer-input"),
      send: document.getElementById("send"),
      stop: document.getElementById("stop"),
      reason: document.getElementById("composer-reason"),
      count: document.getElementById("composer-count"),
      generation: document.getElementById("chat-generation"),
      newChat: document.getElementById("new-chat"),
    };
    this.provider = root.dataset.provider || "";
    this.memory = new MemoryPanel(this);
    this.context = new ContextPanel(this);
    this.refetchHistory = debounce(() => this.history(), 60);
    this.drawers = new Drawers({ backdrop: document.getElementById("drawer-backdrop") });
    this.chats = new ChatList(this, this.drawers);
  }

  start() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const url = `${scheme}://${location.host}/ws/chat/${encodeURIComponent(this.workflowId)}/`;
    this.socket = new ChatSocket(url, {
      onFrame: (frame) => this.onFrame(frame),
      onState: (state, attempt) => this.onConnState(state, attempt),
    });
    this.bindComposer();
    this.bindChrome();
    this.socket.connect();
    this.memory.start();
    this.context.refresh();
    this.chats.start();
    this.updateComposer();
    setInterval(() => refreshTimes(this.root), 30000);
  }

  // --- connection state ---

  onConnState(state, attempt) {
    this.connState = state;
    const labels = {
      connecting: "Connecting…",
      open: "Connected",
      reconnecting: "Reconnecting…",
      restarting: "Server restarting…",
      unauthenticated: "Signed out",
      gone: "Unavailable",
      transferred: "Transferred",
    };
    // Connected to a workflow whose agent cannot answer: the header says that, not "Connected".
    const cannotAnswer = this.state.cannotAnswer;
    const shown = state === "open" && cannotAnswer ? "cannot-answer" : state;
    this.el.conn.textContent = shown === "cannot-answer" ? "Cannot answer" : labels[state] || state;
    this.el.conn.dataset.state = shown;
    this.el.conn.title = shown === "cannot-answer" ? cannotAnswer : "";
    const banner = this.el.banner;
    if (state === "reconnecting") {
      banner.hidden = false;
      banner.dataset.kind = "warn";
      banner.textContent = attempt > 1 ? `Reconnecting… (attempt ${attempt})` : "Reconnecting…";
    } else if (state === "restarting") {
      banner.hidden = false;
      banner.dataset.kind = "warn";
      banner.textContent = "The server is restarting; reconnecting…";
    } else if (state === "unauthenticated") {
      banner.hidden = false;
      banner.dataset.kind = "error";
      banner.textContent = "You are signed out. Redirecting to sign in…";
      location.assign(`/accounts/login/?next=${encodeURIComponent(location.pathname)}`);
    } else if (state === "gone") {
      banner.hidden = false;
      banner.dataset.kind = "error";
      banner.textContent = "This workflow is not available any more.";
    } else if (state === "transferred") {
      banner.hidden = false;
      banner.dataset.kind = "error";
      banner.textContent = "This workflow was transferred to another owner. Its chats, Memory and Context went with it.";
    } else if (state === "open") {
      // not deployed has its own banner in the page; a live agent that cannot answer says why here
      banner.hidden = !(cannotAnswer && this.generation > 0);
      banner.dataset.kind = "warn";
      banner.textContent = banner.hidden ? "" : cannotAnswer;
      this.chats.loadSoon(); // the list may have changed (or failed to load) while the socket was down
    }
    this.updateComposer();
  }

  // --- frames ---

  get generation() {
    return this.state.generation;
  }

  get liveRunId() {
    return this.state.liveRunId;
  }

  get link() {
    return { id: this.socket.ws, open: this.socket.open };
  }

  onFrame(frame) {
    this.apply(this.state.receive(frame, this.link));
  }

  // Carry out what the state asks for after a frame (chat-state.js).
  apply(effects) {
    let render = false;
    let composer = false;
    for (const effect of effects) {
      switch (effect.type) {
        case "render":
          render = true;
          break;
        case "composer":
          composer = true;
          break;
        case "draft":
          this.renderDraft(this.state.runs.get(effect.runId));
          break;
        case "resume":
          this.resume(effect);
          break;
        case "history":
          this.refetchHistory();
          break;
        case "context":
          this.context.refresh();
          break;
        case "memory":
          this.memory.refreshSoon();
          break;
        case "chats":
          this.chats.loadSoon();
          break;
        case "generation":
          this.el.generation.textContent = String(this.generation);
          this.context.setGeneration(this.generation);
          break;
        case "connection":
          if (this.connState === "open") this.onConnState("open", 0);
          break;
        case "gone":
          this.onConnState("gone", 0);
          break;
        case "announce":
          this.announce(effect.text, Boolean(effect.error));
          break;
        default:
          break;
      }
    }
    if (render) this.render();
    if (composer) this.updateComposer();
  }

  resume({ runId, afterSeq }) {
    this.socket
      .request({ type: "resume", run_id: runId, after_seq: afterSeq }, "run.snapshot")
      .then((snapshot) => this.onFrame(snapshot))
      .catch((error) => this.apply(this.state.resumeFailed(runId, error)));
  }

  // --- operations ---

  async history() {
    if (!this.socket.open) return;
    try {
      const frame = await this.socket.request({ type: "history", limit: this.state.historyLimit() }, "thread");
      this.apply(this.state.receive(frame, this.link));
    } catch {
      // the reconnect's thread frame brings it back
    }
  }

  async loadEarlier() {
    const state = this.state;
    if (this.loadingEarlier || !state.hasMore || !state.path.length || !this.socket.open) return;
    this.loadingEarlier = true;
    this.el.earlier.textContent = "Loading…";
    const scroller = this.el.scroller;
    const before = scroller.scrollHeight - scroller.scrollTop;
    try {
      const frame = await this.socket.request({ type: "history", before: state.path[0].id, limit: HISTORY_PAGE }, "thread");
      state.prependEarlier(frame);
      this.render({ keepScroll: false });
      scroller.scrollTop = scroller.scrollHeight - before;
    } catch (error) {
      this.announce(error.message || "Could not load earlier messages.", true);
    } finally {
      this.loadingEarlier = false;
      this.el.earlier.textContent = "Load earlier messages";
    }
  }

  async send() {
    const text = this.el.input.value;
    if (!text.trim() || !this.canSend()) return;
    const clientId = `c-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
    this.state.sendStarted(clientId, text);
    this.el.input.value = "";
    this.autosize();
    this.render({ stick: true });
    this.updateComposer();
    try {
      const ack = await this.socket.request({ type: "send", text, client_message_id: clientId });
      this.state.accepted(ack);
      this.updateComposer();
      this.refetchHistory();
    } catch (error) {
      this.state.sendFailed();
      if (!this.el.input.value) this.el.input.value = text;
      this.autosize();
      this.render();
      this.announce(error.message || "The message was not sent.", true);
    }
    this.updateComposer();
    this.el.input.focus();
  }

  async stop() {
    const runId = this.state.stopStarted();
    if (!runId) return;
    this.updateComposer();
    try {
      await this.socket.request({ type: "stop", run_id: runId });
    } catch (error) {
      this.state.stopFailed();
      if (error.code !== "not_stoppable") this.announce(error.message || "Could not stop.", true);
      this.updateComposer();
    }
  }

  async operate(frame, { focusComposer = false } = {}) {
    try {
      const ack = await this.socket.request({ ...frame, expected_revision: this.state.revision });
      this.state.accepted(ack);
      this.updateComposer();
      await this.history();
      if (focusComposer) this.el.input.focus();
      return true;
    } catch (error) {
      this.anchor = null;
      if (error.code === "revision_conflict") {
        this.announce("The chat changed elsewhere; showing the latest.", true);
        await this.history();
      } else {
        this.announce(error.message || "That did not work.", true);
      }
      return false;
    }
  }

  async saveEdit(messageId) {
    const text = this.editing ? this.editing.text : "";
    if (!text.trim()) return;
    if (text.length > MAX_MESSAGE_CHARS) {
      const over = text.length - MAX_MESSAGE_CHARS;
      this.announce(`The edited message is ${over.toLocaleString()} characters over the ${MAX_MESSAGE_CHARS.toLocaleString()}-character limit; shorten it to save.`, true);
      return;
    }
    const ok = await this.operate({ type: "edit", message_id: messageId, text });
    if (ok) {
      this.editing = null;
      this.render({ stick: true });
      this.el.input.focus();
    }
  }

  async feedback(message, value) {
    const next = this.state.nextFeedback(message, value);
    try {
      const ack = await this.socket.request({ type: "feedback", message_id: message.id, value: next });
      this.state.setFeedback(message.id, ack.feedback ?? next);
      this.render({ keepScroll: true });
      this.announce(next ? `Marked as ${next === "up" ? "helpful" : "not helpful"}.` : "Feedback removed.");
    } catch (error) {
      this.announce(error.message || "Feedback was not saved.", true);
    }
  }

  async newChat() {
    const ok = await confirmAction({
      title: "Start a new chat?",
      text: "This chat is kept under Chats, read-only, with its ratings. The agent starts with a new mind: its Context and working notes for this generation are cleared. Memory stays.",
      ok: "Start a new chat",
    });
    if (!ok) return;
    try {
      await api("POST", `${this.apiBase}/chat/archive`);
      this.state.clear();
      this.editing = null;
      if (this.archived) this.chats.showCurrent();
      this.render();
      this.updateComposer();
      await this.history();
      this.context.refresh();
      await this.chats.load();
      this.announce("New chat started. The previous one is under Chats; Memory was kept.");
      this.el.input.focus();
    } catch (error) {
      this.announce(error.message || "Could not start a new chat.", true);
    }
  }

  // --- archived chats (read-only) ---

  showArchived(transcript) {
    this.archived = transcript;
    this.editing = null;
    this.render({ top: true });
    this.updateComposer();
  }

  showCurrent() {
    if (!this.archived) return;
    this.archived = null;
    this.render({ stick: true });
    this.updateComposer();
  }

  // --- composer ---

  canSend() {
    return this.socket.open && !this.liveRunId && this.generation > 0 && this.el.input.value.length <= MAX_MESSAGE_CHARS;
  }

  sendBlockedReason() {
    return this.state.sendBlockedReason({
      open: this.socket.open,
      transferred: this.connState === "transferred",
      length: this.el.input.value.length,
    });
  }

  updateCount() {
    const length = this.el.input.value.length;
    const count = this.el.count;
    count.hidden = length < COUNTER_FROM;
    count.textContent = `${length.toLocaleString()} / ${MAX_MESSAGE_CHARS.toLocaleString()}`;
    count.dataset.over = String(length > MAX_MESSAGE_CHARS);
  }

  updateComposer() {
    this.el.composer.hidden = Boolean(this.archived);
    const reason = this.sendBlockedReason();
    this.el.send.disabled = Boolean(reason);
    this.el.reason.textContent = reason;
    this.updateCount();
    const live = Boolean(this.liveRunId);
    this.el.stop.hidden = !live;
    this.el.stop.disabled = this.state.stopping || !this.socket.open;
    this.el.stop.textContent = this.state.stopping ? "Stopping…" : "Stop";
    this.el.send.hidden = live;
    if (!live && !this.archived && document.activeElement === document.body) this.el.input.focus();
  }

  autosize() {
    const input = this.el.input;
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight, 240)}px`;
  }

  // A paste that makes the message too long is kept whole and said so; it is never cut silently.
  onPaste(event) {
    const pasted = event.clipboardData?.getData("text") ?? "";
    const input = this.el.input;
    const after = input.value.length - (input.selectionEnd - input.selectionStart) + pasted.length;
    if (after > MAX_MESSAGE_CHARS) {
      this.announce(
        `The pasted text makes the message ${after.toLocaleString()} characters long; a message may hold at most ${MAX_MESSAGE_CHARS.toLocaleString()}. Shorten it before sending.`,
        true,
      );
    }
  }

  bindComposer() {
    this.el.composer.addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    this.el.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        if (this.canSend()) this.send();
        else this.announce(this.sendBlockedReason());
      }
    });
    this.el.input.addEventListener("input", () => {
      this.autosize();
      this.updateComposer();
    });
    this.el.input.addEventListener("paste", (event) => this.onPaste(event));
    this.el.stop.addEventListener("click", () => this.stop());
  }

  bindChrome() {
    this.el.earlier.addEventListener("click", () => this.loadEarlier());
    this.el.scroller.addEventListener("scroll", () => {
      if (this.el.scroller.scrollTop < 60 && !this.archived) this.loadEarlier();
    });
    this.el.newChat.addEventListener("click", () => this.newChat());
    this.drawers.add("chats", {
      panel: document.getElementById("chats"),
      toggle: document.getElementById("chats-toggle"),
      query: "(max-width: 1100px)",
    });
    this.drawers.add("panels", {
      panel: document.getElementById("panels"),
      toggle: document.getElementById("panels-toggle"),
      query: "(max-width: 900px)",
    });
  }

  announce(text, isError = false) {
    const node = this.el.announcer;
    node.textContent = "";
    node.dataset.kind = isError ? "error" : "info";
    // a fresh text node makes screen readers announce repeated messages too
    setTimeout(() => {
      node.textContent = text;
    }, 30);
    if (isError) {
      const banner = this.el.banner;
      if (this.connState === "open") {
        banner.hidden = false;
        banner.dataset.kind = "error";
        banner.textContent = text;
        clearTimeout(this.bannerTimer);
        this.bannerTimer = setTimeout(() => {
          if (this.connState === "open") banner.hidden = true;
        }, 6000);
      }
    }
  }

  // --- rendering ---

  nearBottom() {
    const s = this.el.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  }

  render({ stick = false, keepScroll = false, top = false } = {}) {
    const scroller = this.el.scroller;
    const wasNearBottom = this.nearBottom();
    const scrollTop = scroller.scrollTop;
    const focusKey = this.anchor?.focusKey || document.activeElement?.dataset?.focusKey;

    const items = this.archived ? this.archivedItems() : this.currentItems();
    this.el.messages.replaceChildren(...items);
    this.el.empty.hidden = items.length > 0 || Boolean(this.archived);
    this.el.earlier.hidden = !this.state.hasMore || Boolean(this.archived);

    const editArea = this.editing ? this.el.messages.querySelector(".edit-input") : null;
    let again = focusKey ? this.el.messages.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`) : null;
    // the last version's "next" arrow is disabled: focus stays in the switcher on the other arrow
    if (again?.disabled) again = again.closest(".versions")?.querySelector("button:not(:disabled)") || null;
    if (again) again.focus({ preventScroll: true });
    else if (editArea && (focusKey || document.activeElement === document.body)) editArea.focus();
    const anchored = this.anchor ? this.el.messages.querySelector(`[data-id="${CSS.escape(this.anchor.id)}"]`) : null;
    if (anchored) {
      // A version switch keeps the switched message where the owner is looking.
      scroller.scrollTop = scrollTop;
      anchored.scrollIntoView({ block: "nearest" });
      this.anchor = null;
    } else if (top) scroller.scrollTop = 0;
    else if (stick || (wasNearBottom && !keepScroll)) scroller.scrollTop = scroller.scrollHeight;
    else scroller.scrollTop = scrollTop;
  }

  currentItems() {
    return this.state.items().map((item) => {
      if (item.kind === "mark") return this.renderMark(item.mark);
      if (item.kind === "message") return this.renderMessage(item.message, { isLast: item.isLast });
      if (item.kind === "pending") return this.renderPending(item.text);
      return this.renderRunDraft(item.run);
    });
  }

  // Where the agent's Context was cleared or compacted (from the stored rows the thread frame lists).
  renderMark(mark) {
    const text = mark.kind === "context_cleared" ? "Context cleared" : "Earlier messages summarized";
    return h("li", { class: "msg-mark", role: "separator", "data-mark": mark.kind }, h("span", { text }));
  }

  archivedItems() {
    return this.archived.path.map((message) => this.renderMessage(message, { readOnly: true }));
  }

  renderPending(text) {
    return h(
      "li",
      { class: "msg msg-user is-pending" },
      h("div", { class: "msg-role visually-hidden", text: "You" }),
      h("div", { class: "bubble" }, h("div", { class: "msg-text" }, renderText(text))),
      h("div", { class: "msg-meta muted", text: "Sending…" }),
    );
  }

  renderRunDraft(run) {
    const live = run.state === "live";
    const body = h("div", {
      class: "msg-text",
      id: `draft-${run.id}`,
      "aria-live": "polite",
      "aria-busy": live ? "true" : "false",
    });
    if (run.text) body.append(renderText(run.text));
    else if (live) body.append(h("span", { class: "thinking", text: "Thinking…" }));
    const steps = run.steps.length
      ? h(
          "ul",
          { class: "steps", "aria-label": "Tool steps" },
          run.steps.map((step) => h("li", { class: `step step-${step.state}`, text: `${step.name} · ${step.state}` })),
        )
      : null;
    const classes = ["msg", "msg-assistant", live ? "is-streaming" : `is-${run.state}`];
    return h(
      "li",
      { class: classes.join(" "), "data-run": run.id, "data-state": run.state },
      h("div", { class: "msg-role visually-hidden", text: "Agent" }),
      h("div", { class: "bubble" }, steps, body, this.statusNote(run.state === "live" ? "" : run.state, run.error)),
    );
  }

  statusNote(status, error) {
    if (status === "stopped") {
      return h("p", { class: "status-note status-stopped", text: error?.message ? `Stopped: ${error.message}` : "Stopped" });
    }
    if (status === "error") {
      return h("p", { class: "status-note status-error", role: "note", text: `Error: ${error?.message || "the answer failed."}` });
    }
    return null;
  }

  renderMessage(message, { isLast = false, readOnly = false } = {}) {
    const isUser = message.role === "user";
    const item = h("li", {
      class: `msg ${isUser ? "msg-user" : "msg-assistant"} is-${message.status}`,
      "data-id": message.id,
      "data-role": message.role,
      "data-status": message.status,
    });
    item.append(h("div", { class: "msg-role visually-hidden", text: isUser ? "You" : "Agent" }));

    if (this.editing && this.editing.id === message.id) {
      item.append(this.renderEditor(message));
      return item;
    }
    const bubble = h("div", { class: "bubble" }, h("div", { class: "msg-text" }, renderBody(message)));
    const note = isUser ? null : this.statusNote(message.status, message.error);
    if (note) bubble.append(note);
    item.append(bubble);

    const tools = h("div", { class: "msg-tools" });
    if (message.versions && message.versions.count > 1) tools.append(this.renderVersions(message, readOnly));
    if (readOnly) {
      if (message.feedback) {
        tools.append(
          h("span", { class: "rated" }, icon(message.feedback), message.feedback === "up" ? "Rated good" : "Rated bad"),
        );
      }
      if (message.created_at) tools.append(timeNode(message.created_at, "when msg-time"));
      item.append(tools);
      return item;
    }
    const liveBusy = Boolean(this.liveRunId);
    if (isUser && message.editable) {
      tools.append(
        h("button", {
          type: "button",
          class: "tool",
          text: "Edit",
          "aria-label": "Edit this message",
          "data-focus-key": `edit:${message.id}`,
          disabled: liveBusy,
          onclick: () => {
            this.editing = { id: message.id, text: message.text };
            this.render({ keepScroll: true });
          },
        }),
      );
    }
    if (!isUser) {
      tools.append(
        h(
          "button",
          {
            type: "button",
            class: "tool tool-icon",
            "aria-label": "Good answer",
            "aria-pressed": String(message.feedback === "up"),
            "data-focus-key": `up:${message.id}`,
            onclick: () => this.feedback(message, "up"),
          },
          icon("up"),
        ),
        h(
          "button",
          {
            type: "button",
            class: "tool tool-icon",
            "aria-label": "Bad answer",
            "aria-pressed": String(message.feedback === "down"),
            "data-focus-key": `down:${message.id}`,
            onclick: () => this.feedback(message, "down"),
          },
          icon("down"),
        ),
      );
    }
    if (isLast && message.editable && (!isUser || message.run_state)) {
      tools.append(
        h("button", {
          type: "button",
          class: "tool",
          text: isUser ? "Answer again" : "Retry",
          "aria-label": isUser ? "Ask for an answer again" : "Retry this answer",
          "data-focus-key": `retry:${message.id}`,
          disabled: liveBusy,
          onclick: () => this.operate({ type: "retry", message_id: message.id }, { focusComposer: true }),
        }),
      );
    }
    if (message.created_at) tools.append(timeNode(message.created_at, "when msg-time"));
    if (isUser && isLast && !liveBusy && ["stopped", "error"].includes(message.run_state)) {
      item.append(h("p", { class: "status-note status-stopped", text: message.run_state === "stopped" ? "Stopped before an answer." : "No answer: the run failed." }));
    }
    if (tools.childElementCount) item.append(tools);
    return item;
  }

  renderVersions(message, readOnly = false) {
    const { index, count, ids } = message.versions;
    if (readOnly) {
      return h("span", { class: "versions versions-label", text: `Version ${index} of ${count}` });
    }
    const go = (target, key) => () => {
      // Keep the switched message in view, and focus on the same arrow of its new version.
      this.anchor = { id: target, focusKey: `${key}:${target}` };
      this.operate({ type: "switch", message_id: target });
    };
    const liveBusy = Boolean(this.liveRunId);
    return h(
      "div",
      { class: "versions", role: "group", "aria-label": "Versions" },
      h("button", {
        type: "button",
        class: "tool tool-arrow",
        text: "‹",
        "aria-label": "Previous version",
        "data-focus-key": `prev:${message.id}`,
        disabled: index <= 1 || liveBusy,
        onclick: go(ids[index - 2], "prev"),
      }),
      h("span", { class: "versions-label", "aria-label": `Version ${index} of ${count}`, text: `${index}/${count}` }),
      h("button", {
        type: "button",
        class: "tool tool-arrow",
        text: "›",
        "aria-label": "Next version",
        "data-focus-key": `next:${message.id}`,
        disabled: index >= count || liveBusy,
        onclick: go(ids[index], "next"),
      }),
    );
  }

  renderEditor(message) {
    const area = h("textarea", { class: "edit-input input", rows: "3", "aria-label": "Edit your message" });
    area.value = this.editing.text;
    area.addEventListener("input", () => {
      this.editing.text = area.value;
    });
    const cancel = () => {
      this.editing = null;
      this.render({ keepScroll: true });
      this.el.messages.querySelector(`[data-focus-key="edit:${CSS.escape(message.id)}"]`)?.focus();
    };
    area.addEventListener("keydown", (event) => {
      if (event.key === "Escape") cancel();
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.saveEdit(message.id);
      }
    });
    const form = h(
      "form",
      {
        class: "editor",
        onsubmit: (event) => {
          event.preventDefault();
          this.saveEdit(message.id);
        },
      },
      area,
      h(
        "div",
        { class: "editor-actions" },
        h("button", { type: "button", class: "button", text: "Cancel", onclick: cancel }),
        h("button", { type: "submit", class: "button button-primary", text: "Save", disabled: Boolean(this.liveRunId) }),
      ),
    );
    return form;
  }

  // Streamed text is drawn at most once per frame: the Markdown of the whole answer so far is rendered
  // again each time, so a half-written table or code block settles as the rest arrives.
  renderDraft(run) {
    this.drafting.add(run.id);
    if (this.draftFrame) return;
    this.draftFrame = requestAnimationFrame(() => {
      this.draftFrame = null;
      const ids = [...this.drafting];
      this.drafting.clear();
      for (const id of ids) {
        const current = this.state.runs.get(id);
        if (current) this.paintDraft(current);
      }
    });
  }

  paintDraft(run) {
    if (this.archived) return;
    const node = this.el.messages.querySelector(`[data-run="${CSS.escape(run.id)}"]`);
    if (!node) {
      this.render();
      return;
    }
    const stick = this.nearBottom();
    // update inside the same live region so assistive technology follows one growing answer
    const fresh = this.renderRunDraft(run);
    node.querySelector(".msg-text").replaceChildren(...fresh.querySelector(".msg-text").childNodes);
    const steps = fresh.querySelector(".steps");
    const oldSteps = node.querySelector(".steps");
    if (oldSteps) oldSteps.remove();
    if (steps) node.querySelector(".bubble").prepend(steps);
    if (stick) this.el.scroller.scrollTop = this.el.scroller.scrollHeight;
  }
}
