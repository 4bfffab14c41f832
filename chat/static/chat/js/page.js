// The chat page: wires the protocol state (chat-state.js), the message list (message-list.js), the
// composer (composer.js) and the operations (operations.js) to the socket, and shows the connection,
// the Chats sidebar with archived chats read-only, the side panels and the drawers narrow screens use.

import { ChatState } from "./chat-state.js";
import { ChatList } from "./chats.js";
import { Composer } from "./composer.js";
import { ContextPanel } from "./context-panel.js";
import { refreshTimes } from "./dom.js";
import { Drawers } from "./drawer.js";
import { MemoryPanel } from "./memory-panel.js";
import { MessageList } from "./message-list.js";
import { ChatOperations } from "./operations.js";
import { ChatSocket } from "./socket.js";

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

    this.editing = null; // {id, text}: the message being edited
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
      input: document.getElementById("composer-input"),
      generation: document.getElementById("chat-generation"),
      newChat: document.getElementById("new-chat"),
    };
    this.ops = new ChatOperations(this);
    this.composer = new Composer(this, { onSend: () => this.ops.send(), onStop: () => this.ops.stop() });
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
    this.composer.bind();
    this.bindChrome();
    this.socket.connect();
    this.memory.start();
    this.context.refresh();
    this.chats.start();
    this.composer.update();
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
      banner.textContent = attempt > 1 ? `The server is restarting; reconnecting… (attempt ${attempt})` : "The server is restarting; reconnecting…";
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
    this.composer.update();
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
          this.ops.resume(effect);
          break;
        case "history":
          this.ops.refetchHistory();
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
    if (composer) this.composer.update();
  }

  // --- archived chats (read-only) ---

  showArchived(transcript) {
    this.archived = transcript;
    this.editing = null;
    this.render({ top: true });
    this.composer.update();
  }

  showCurrent() {
    if (!this.archived) return;
    this.archived = null;
    this.render({ stick: true });
    this.composer.update();
  }

  bindChrome() {
    this.el.earlier.addEventListener("click", () => this.ops.loadEarlier());
    this.el.scroller.addEventListener("scroll", () => {
      if (this.el.scroller.scrollTop < 60 && !this.archived) this.ops.loadEarlier();
    });
    this.el.newChat.addEventListener("click", () => this.ops.newChat());
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
      saveEdit: (messageId) => this.ops.saveEdit(messageId),
      feedback: (message, value) => this.ops.feedback(message, value),
      retry: (message) => this.ops.retry(message),
      switchTo: (target, key) => this.ops.switchTo(target, key),
    };
  }
}
