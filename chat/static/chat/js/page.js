// The chat page: the message path, versions, streaming runs, edit/retry/switch, feedback, the Chats
// sidebar with archived chats shown read-only, and the drawers narrow screens use.

import { api } from "./api.js";
import { ChatState, HISTORY_PAGE, MAX_MESSAGE_CHARS } from "./chat-state.js";
import { ChatList } from "./chats.js";
import { ContextPanel } from "./context-panel.js";
import { confirmAction, debounce, refreshTimes } from "./dom.js";
import { Drawers } from "./drawer.js";
import { MemoryPanel } from "./memory-panel.js";
import { MessageList } from "./message-list.js";
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
    this.list = new MessageList({
      container: this.el.messages,
      scroller: this.el.scroller,
      empty: this.el.empty,
      earlier: this.el.earlier,
      actions: this.messageActions(),
    });
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
      this.list.anchor = null;
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

  render(options = {}) {
    const archived = this.archived;
    const items = archived
      ? archived.path.map((message) => ({ key: `archived:${message.id}`, kind: "message", message, isLast: false }))
      : this.state.items();
    const view = {
      editing: archived ? null : this.editing,
      liveBusy: Boolean(this.liveRunId),
      readOnly: Boolean(archived),
      hasMore: this.state.hasMore,
    };
    this.list.render(items, view, options);
  }

  renderDraft(run) {
    if (!run || this.archived) return;
    this.list.paintDraftSoon(run, () => {
      if (!this.archived) this.render();
    });
  }

  // What the message list's buttons do.
  messageActions() {
    return {
      startEdit: (message) => {
        this.editing = { id: message.id, text: message.text };
        this.render({ keepScroll: true });
      },
      cancelEdit: (message) => {
        this.editing = null;
        this.render({ keepScroll: true });
        this.el.messages.querySelector(`[data-focus-key="edit:${CSS.escape(message.id)}"]`)?.focus();
      },
      editText: (text) => {
        if (this.editing) this.editing.text = text;
      },
      saveEdit: (messageId) => this.saveEdit(messageId),
      feedback: (message, value) => this.feedback(message, value),
      retry: (message) => this.operate({ type: "retry", message_id: message.id }, { focusComposer: true }),
      switchTo: (target, key) => {
        // Keep the switched message in view, and focus on the same arrow of its new version.
        this.list.anchor = { id: target, focusKey: `${key}:${target}` };
        this.operate({ type: "switch", message_id: target });
      },
    };
  }
}
