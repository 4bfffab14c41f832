// The owner's pages: the workflow list and the chat with its Notes, Memory and Context panels.
//
// One ES module, no build step. Text from messages and Memory is only ever placed with textContent
// or text nodes (see renderText); no HTML from the server or the agent is interpreted.
// The websocket protocol is docs/chat-protocol.md.

const RECONNECT_MAX_MS = 5000;
const HISTORY_PAGE = 50;
const TERMINAL = new Set(["run.finished", "run.stopped", "run.error"]);

// --- small DOM helpers --------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";
const ICONS = {
  up: "M3 10h4v11H3z M9 10l4-8c1.6 0 2.6 1.1 2.4 2.7L15 9h5.2a2 2 0 0 1 2 2.4l-1.5 7.9A2 2 0 0 1 18.7 21H9z",
  down: "M3 3h4v11H3z M9 14l4 8c1.6 0 2.6-1.1 2.4-2.7L15 15h5.2a2 2 0 0 0 2-2.4l-1.5-7.9A2 2 0 0 0 18.7 3H9z",
};

function icon(name) {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "icon");
  const path = document.createElementNS(SVG_NS, "path");
  path.setAttribute("d", ICONS[name]);
  svg.append(path);
  return svg;
}

function cookie(name) {
  for (const part of document.cookie.split(";")) {
    const [key, ...rest] = part.trim().split("=");
    if (key === name) return decodeURIComponent(rest.join("="));
  }
  return "";
}

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `Request failed (${status}).`);
    this.status = status;
    this.code = (body && body.code) || "http_error";
    this.extra = (body && body.extra) || {};
  }
}

async function api(method, url, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRFToken"] = cookie("csrftoken");
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

function formatWhen(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  return date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

// --- the safe text renderer ---------------------------------------------------------------------
// Paragraphs, line breaks, bullet and numbered lists, fenced code blocks and `inline code`.
// Everything it produces is built from elements and text nodes.

const FENCE = /^\s*```\s*([\w+.#-]*)\s*$/;
const FENCE_END = /^\s*```\s*$/;
const BULLET = /^\s*[-*•]\s+(.*)$/;
const NUMBERED = /^\s*\d{1,4}[.)]\s+(.*)$/;

function inline(text) {
  const out = [];
  for (const part of text.split(/(`[^`\n]+`)/)) {
    if (!part) continue;
    if (part.length > 2 && part.startsWith("`") && part.endsWith("`")) out.push(h("code", { text: part.slice(1, -1) }));
    else out.push(document.createTextNode(part));
  }
  return out;
}

export function renderText(text) {
  const fragment = document.createDocumentFragment();
  const lines = String(text ?? "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !FENCE_END.test(lines[i])) body.push(lines[i++]);
      i += 1;
      const code = h("code", { text: body.join("\n") });
      if (fence[1]) code.dataset.lang = fence[1];
      fragment.append(h("pre", { class: "code-block" }, code));
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    if (BULLET.test(line) || NUMBERED.test(line)) {
      const ordered = !BULLET.test(line);
      const pattern = ordered ? NUMBERED : BULLET;
      const list = h(ordered ? "ol" : "ul");
      while (i < lines.length && pattern.test(lines[i])) {
        list.append(h("li", {}, inline(lines[i].match(pattern)[1])));
        i += 1;
      }
      fragment.append(list);
      continue;
    }
    const paragraph = h("p");
    let first = true;
    while (i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !BULLET.test(lines[i]) && !NUMBERED.test(lines[i])) {
      if (!first) paragraph.append(h("br"));
      paragraph.append(...inline(lines[i]));
      first = false;
      i += 1;
    }
    fragment.append(paragraph);
  }
  return fragment;
}

// --- confirmation dialog ------------------------------------------------------------------------

function confirmAction({ title, text, ok }) {
  const dialog = document.getElementById("confirm");
  const opener = document.activeElement;
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = ok;
  dialog.returnValue = "cancel";
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => {
        if (opener && opener.isConnected) opener.focus();
        resolve(dialog.returnValue === "ok");
      },
      { once: true },
    );
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

// --- the websocket ------------------------------------------------------------------------------

class ChatSocket {
  constructor(url, { onFrame, onState }) {
    this.url = url;
    this.onFrame = onFrame;
    this.onState = onState;
    this.pending = new Map();
    this.nextId = 1;
    this.attempt = 0;
    this.ws = null;
    this.closedForGood = false;
  }

  get open() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  connect() {
    this.onState(this.attempt === 0 ? "connecting" : "reconnecting", this.attempt);
    const ws = new WebSocket(this.url);
    this.ws = ws;
    ws.addEventListener("open", () => {
      this.attempt = 0;
      this.onState("open", 0);
    });
    ws.addEventListener("message", (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      const waiter = frame.request_id != null ? this.pending.get(frame.request_id) : undefined;
      if (waiter && (frame.type === "ack" || frame.type === "error" || frame.type === waiter.answer)) {
        this.pending.delete(frame.request_id);
        if (frame.type === "error") waiter.reject(frame);
        else waiter.resolve(frame);
        return;
      }
      this.onFrame(frame);
    });
    ws.addEventListener("close", (event) => {
      if (this.ws !== ws) return;
      for (const waiter of this.pending.values()) {
        waiter.reject({ code: "disconnected", message: "The connection dropped; try again when it is back." });
      }
      this.pending.clear();
      if (event.code === 4401) {
        this.closedForGood = true;
        this.onState("unauthenticated", 0);
        return;
      }
      if (event.code === 4404) {
        this.closedForGood = true;
        this.onState("gone", 0);
        return;
      }
      if (this.closedForGood) return;
      this.attempt += 1;
      this.onState("reconnecting", this.attempt);
      const delay = Math.min(RECONNECT_MAX_MS, 300 * 2 ** Math.min(this.attempt - 1, 5));
      setTimeout(() => this.connect(), delay);
    });
  }

  // Send a frame; resolves with its ack (or with the frame of type `answer`), rejects with an error frame.
  request(frame, answer = "ack") {
    if (!this.open) {
      return Promise.reject({ code: "disconnected", message: "Not connected; reconnecting…" });
    }
    const requestId = `r${this.nextId++}`;
    return new Promise((resolve, reject) => {
      this.pending.set(requestId, { resolve, reject, answer });
      this.ws.send(JSON.stringify({ ...frame, request_id: requestId }));
    });
  }

  close() {
    this.closedForGood = true;
    if (this.ws) this.ws.close();
  }
}

// --- the chat page ------------------------------------------------------------------------------

class ChatPage {
  constructor(root) {
    this.root = root;
    this.workflowId = root.dataset.workflow;
    this.agentId = root.dataset.agent;
    this.memoryId = root.dataset.memory;
    this.window = Number(root.dataset.window) || 128000;
    this.hasContext = root.dataset.hasContext === "1";
    this.generation = Number(root.dataset.generation) || 0;
    this.apiBase = `/api/v1/workflows/${encodeURIComponent(this.workflowId)}`;

    this.path = [];
    this.hasMore = false;
    this.revision = 0;
    this.runs = new Map(); // run_id → {id, seq, text, state, steps, buffer, resuming, userMessageId, replyId, error}
    this.liveRunId = null;
    this.editing = null; // {id, text}
    this.pendingSend = null; // {clientId, text}
    this.loadingEarlier = false;
    this.stopping = false;
    this.connState = "connecting";

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
      generation: document.getElementById("chat-generation"),
    };
    this.memory = new MemoryPanel(this);
    this.context = new ContextPanel(this);
    this.refetchHistory = debounce(() => this.history(), 60);
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
    this.updateComposer();
  }

  // --- connection state ---

  onConnState(state, attempt) {
    this.connState = state;
    const labels = {
      connecting: "Connecting…",
      open: "Connected",
      reconnecting: "Reconnecting…",
      unauthenticated: "Signed out",
      gone: "Unavailable",
    };
    this.el.conn.textContent = labels[state] || state;
    this.el.conn.dataset.state = state;
    const banner = this.el.banner;
    if (state === "reconnecting") {
      banner.hidden = false;
      banner.dataset.kind = "warn";
      banner.textContent = attempt > 1 ? `Reconnecting… (attempt ${attempt})` : "Reconnecting…";
    } else if (state === "unauthenticated") {
      banner.hidden = false;
      banner.dataset.kind = "error";
      banner.textContent = "You are signed out. Redirecting to sign in…";
      location.assign(`/accounts/login/?next=${encodeURIComponent(location.pathname)}`);
    } else if (state === "gone") {
      banner.hidden = false;
      banner.dataset.kind = "error";
      banner.textContent = "This workflow is not available any more.";
    } else if (state === "open") {
      banner.hidden = true;
      banner.textContent = "";
    }
    this.updateComposer();
  }

  // --- frames ---

  onFrame(frame) {
    switch (frame.type) {
      case "thread":
        this.applyThread(frame, { replace: true });
        break;
      case "thread.updated":
        this.refetchHistory();
        break;
      case "run.snapshot":
        this.applySnapshot(frame);
        break;
      case "run.started":
      case "run.delta":
      case "run.step":
      case "run.finished":
      case "run.stopped":
      case "run.error":
        this.applyRunEvent(frame);
        break;
      case "context.updated":
        this.context.refresh();
        break;
      case "memory.updated":
        if (!frame.memory_node_id || frame.memory_node_id === this.memoryId) this.memory.refreshSoon();
        break;
      case "workflow.deployed":
      case "workflow.reset":
        if (frame.generation !== undefined) this.setGeneration(frame.generation);
        this.refetchHistory();
        this.context.refresh();
        break;
      case "workflow.deleted":
        this.onConnState("gone", 0);
        break;
      case "error":
        this.announce(frame.message || "Something went wrong.", true);
        break;
      default:
        break;
    }
  }

  setGeneration(generation) {
    this.generation = Number(generation) || 0;
    this.el.generation.textContent = String(this.generation);
    this.context.setGeneration(this.generation);
  }

  applyThread(frame, { replace }) {
    if (frame.generation !== undefined && frame.generation !== this.generation) this.setGeneration(frame.generation);
    this.revision = frame.revision ?? this.revision;
    if (replace) this.path = frame.path || [];
    this.hasMore = Boolean(frame.has_more);
    this.syncActiveRuns(frame.active_runs || [], frame.request_id == null);
    if (this.pendingSend && this.path.some((m) => m.client_message_id === this.pendingSend.clientId)) {
      this.pendingSend = null;
    }
    this.render();
  }

  // Runs the thread says are live. A run we thought live that is not listed has ended (its answer is
  // in the path); a listed run is resumed once per socket when we may have missed its events.
  syncActiveRuns(activeRuns, fromConnect) {
    const listed = new Set(activeRuns.map((r) => r.run_id));
    for (const run of this.runs.values()) {
      if (run.state === "live" && !listed.has(run.id) && !run.resuming) run.state = "finished";
    }
    for (const info of activeRuns) {
      const run = this.ensureRun(info.run_id, info);
      const stale = fromConnect || run.seq === 0;
      if (run.state === "live" && stale && run.resumedOn !== this.socket.ws && this.socket.open) this.resume(run);
    }
    this.liveRunId = null;
    for (const run of this.runs.values()) if (run.state === "live") this.liveRunId = run.id;
    if (!this.liveRunId) this.stopping = false;
    this.updateComposer();
  }

  ensureRun(runId, info = {}) {
    let run = this.runs.get(runId);
    if (!run) {
      run = {
        id: runId,
        seq: 0,
        text: "",
        state: "live",
        steps: [],
        buffer: new Map(),
        resuming: false,
        resumedOn: null,
        userMessageId: info.user_message_id || null,
        replyId: info.reply_message_id || null,
        error: null,
      };
      this.runs.set(runId, run);
      this.liveRunId = runId;
    } else {
      run.userMessageId = run.userMessageId || info.user_message_id || null;
      run.replyId = run.replyId || info.reply_message_id || null;
    }
    return run;
  }

  resume(run) {
    run.resuming = true;
    run.resumedOn = this.socket.ws;
    this.socket
      .request({ type: "resume", run_id: run.id, after_seq: run.seq }, "run.snapshot")
      .then((snapshot) => this.applySnapshot(snapshot))
      .catch((error) => {
        run.resuming = false;
        if (error && error.code === "not_found") {
          run.state = "finished";
          this.refetchHistory();
        }
      });
  }

  applySnapshot(snapshot) {
    const run = this.runs.get(snapshot.run_id);
    if (!run || run.state !== "live") return;
    run.resuming = false;
    if (snapshot.seq > run.seq) {
      run.seq = snapshot.seq;
      run.text = snapshot.text || "";
      run.steps = Array.isArray(snapshot.steps) ? snapshot.steps : run.steps;
    }
    run.userMessageId = run.userMessageId || snapshot.user_message_id || null;
    if (["finished", "stopped", "error"].includes(snapshot.state)) {
      this.endRun(run, snapshot.state, snapshot.text, snapshot.error);
      return;
    }
    this.drain(run);
    this.renderDraft(run);
  }

  applyRunEvent(event) {
    const run = this.ensureRun(event.run_id, event);
    if (run.state !== "live") return;
    if (TERMINAL.has(event.type)) {
      const state = { "run.finished": "finished", "run.stopped": "stopped", "run.error": "error" }[event.type];
      run.seq = Math.max(run.seq, event.seq || 0);
      const error = event.type === "run.error" ? { code: event.code, message: event.message } : null;
      this.endRun(run, state, event.text, error, event.reply_message_id);
      return;
    }
    const seq = event.seq || 0;
    if (seq <= run.seq) return;
    if (run.resuming || seq > run.seq + 1) {
      run.buffer.set(seq, event);
      if (!run.resuming && this.socket.open) this.resume(run);
      return;
    }
    this.applyOne(run, event);
    this.drain(run);
    this.renderDraft(run);
  }

  applyOne(run, event) {
    run.seq = event.seq;
    if (event.type === "run.delta") run.text += event.delta || "";
    else if (event.type === "run.step" && event.step) {
      const index = run.steps.findIndex((s) => s.id === event.step.id);
      if (index >= 0) run.steps[index] = event.step;
      else run.steps.push(event.step);
    } else if (event.type === "run.started") {
      run.userMessageId = event.user_message_id || run.userMessageId;
      run.replyId = event.reply_message_id || run.replyId;
    }
  }

  drain(run) {
    for (const seq of [...run.buffer.keys()].sort((a, b) => a - b)) {
      const event = run.buffer.get(seq);
      run.buffer.delete(seq);
      if (seq <= run.seq) continue;
      if (seq !== run.seq + 1) {
        run.buffer.set(seq, event);
        break;
      }
      this.applyOne(run, event);
    }
  }

  endRun(run, state, text, error, replyId) {
    run.state = state;
    if (typeof text === "string") run.text = text;
    run.error = error || null;
    run.replyId = replyId || run.replyId;
    run.buffer.clear();
    if (this.liveRunId === run.id) this.liveRunId = null;
    this.stopping = false;
    const said = { finished: "Answer complete.", stopped: "Answer stopped.", error: "The answer failed." }[state];
    this.announce(said);
    this.render();
    this.updateComposer();
    this.refetchHistory();
  }

  // --- operations ---

  async history() {
    if (!this.socket.open) return;
    const limit = Math.min(200, Math.max(HISTORY_PAGE, this.path.length + 2));
    try {
      const frame = await this.socket.request({ type: "history", limit }, "thread");
      this.applyThread(frame, { replace: true });
    } catch {
      // the reconnect's thread frame brings it back
    }
  }

  async loadEarlier() {
    if (this.loadingEarlier || !this.hasMore || !this.path.length || !this.socket.open) return;
    this.loadingEarlier = true;
    this.el.earlier.textContent = "Loading…";
    const scroller = this.el.scroller;
    const before = scroller.scrollHeight - scroller.scrollTop;
    try {
      const frame = await this.socket.request({ type: "history", before: this.path[0].id, limit: HISTORY_PAGE }, "thread");
      const known = new Set(this.path.map((m) => m.id));
      const older = (frame.path || []).filter((m) => !known.has(m.id));
      this.path = [...older, ...this.path];
      this.hasMore = Boolean(frame.has_more);
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
    this.pendingSend = { clientId, text };
    this.el.input.value = "";
    this.autosize();
    this.render({ stick: true });
    this.updateComposer();
    try {
      const ack = await this.socket.request({ type: "send", text, client_message_id: clientId });
      this.ensureRun(ack.run_id, { user_message_id: ack.message_id });
      this.revision = ack.revision ?? this.revision;
      this.updateComposer();
      this.refetchHistory();
    } catch (error) {
      this.pendingSend = null;
      if (!this.el.input.value) this.el.input.value = text;
      this.autosize();
      this.render();
      this.announce(error.message || "The message was not sent.", true);
    }
    this.updateComposer();
    this.el.input.focus();
  }

  async stop() {
    const runId = this.liveRunId;
    if (!runId) return;
    this.stopping = true;
    this.updateComposer();
    try {
      await this.socket.request({ type: "stop", run_id: runId });
    } catch (error) {
      this.stopping = false;
      if (error.code !== "not_stoppable") this.announce(error.message || "Could not stop.", true);
      this.updateComposer();
    }
  }

  async operate(frame, { focusComposer = false } = {}) {
    try {
      const ack = await this.socket.request({ ...frame, expected_revision: this.revision });
      if (ack.run_id) this.ensureRun(ack.run_id, { user_message_id: ack.message_id });
      this.revision = ack.revision ?? this.revision;
      this.updateComposer();
      await this.history();
      if (focusComposer) this.el.input.focus();
      return true;
    } catch (error) {
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
    const ok = await this.operate({ type: "edit", message_id: messageId, text });
    if (ok) {
      this.editing = null;
      this.render({ stick: true });
      this.el.input.focus();
    }
  }

  async feedback(message, value) {
    const next = message.feedback === value ? null : value;
    try {
      const ack = await this.socket.request({ type: "feedback", message_id: message.id, value: next });
      message.feedback = ack.feedback ?? next;
      this.render({ keepScroll: true });
      this.announce(next ? `Marked as ${next === "up" ? "helpful" : "not helpful"}.` : "Feedback removed.");
    } catch (error) {
      this.announce(error.message || "Feedback was not saved.", true);
    }
  }

  async newChat() {
    const ok = await confirmAction({
      title: "Start a new chat?",
      text: "This clears the chat and the agent's mind for this generation: its Context and working notes are emptied. Memory stays.",
      ok: "Clear and start over",
    });
    if (!ok) return;
    try {
      await api("DELETE", `${this.apiBase}/chat`);
      this.runs.clear();
      this.liveRunId = null;
      this.editing = null;
      this.path = [];
      this.render();
      this.updateComposer();
      await this.history();
      this.context.refresh();
      this.announce("New chat started. Memory was kept.");
      this.el.input.focus();
    } catch (error) {
      this.announce(error.message || "Could not start a new chat.", true);
    }
  }

  // --- composer ---

  canSend() {
    return this.socket.open && !this.liveRunId && this.generation > 0;
  }

  sendBlockedReason() {
    if (this.generation <= 0) return "This workflow is not deployed.";
    if (!this.socket.open) return "Reconnecting… you can send once the connection is back.";
    if (this.liveRunId) return this.stopping ? "Stopping the answer…" : "The agent is answering. Wait, or press Stop.";
    return "";
  }

  updateComposer() {
    const reason = this.sendBlockedReason();
    this.el.send.disabled = Boolean(reason);
    this.el.reason.textContent = reason;
    const live = Boolean(this.liveRunId);
    this.el.stop.hidden = !live;
    this.el.stop.disabled = this.stopping || !this.socket.open;
    this.el.stop.textContent = this.stopping ? "Stopping…" : "Stop";
    this.el.send.hidden = live;
    if (!live && document.activeElement === document.body) this.el.input.focus();
  }

  autosize() {
    const input = this.el.input;
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight, 240)}px`;
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
    this.el.input.addEventListener("input", () => this.autosize());
    this.el.stop.addEventListener("click", () => this.stop());
  }

  bindChrome() {
    this.el.earlier.addEventListener("click", () => this.loadEarlier());
    this.el.scroller.addEventListener("scroll", () => {
      if (this.el.scroller.scrollTop < 60) this.loadEarlier();
    });
    document.getElementById("new-chat").addEventListener("click", () => this.newChat());
    const toggle = document.getElementById("panels-toggle");
    const panels = document.getElementById("panels");
    toggle.addEventListener("click", () => {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      panels.classList.toggle("is-open", open);
      if (open) panels.querySelector("summary")?.focus();
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

  render({ stick = false, keepScroll = false } = {}) {
    const scroller = this.el.scroller;
    const wasNearBottom = this.nearBottom();
    const top = scroller.scrollTop;
    const focusKey = document.activeElement?.dataset?.focusKey;

    const items = [];
    const lastIndex = this.path.length - 1;
    this.path.forEach((message, index) => items.push(this.renderMessage(message, index === lastIndex)));
    if (this.pendingSend && !this.path.some((m) => m.client_message_id === this.pendingSend.clientId)) {
      items.push(this.renderPending(this.pendingSend.text));
    }
    const lastId = this.path.length ? this.path[this.path.length - 1].id : null;
    for (const run of this.runs.values()) {
      if (run.replyId && this.path.some((m) => m.id === run.replyId)) continue;
      const answersHere = run.userMessageId && run.userMessageId === lastId;
      if (run.state === "live" || (answersHere && (run.text || run.error))) items.push(this.renderRunDraft(run));
    }
    this.el.messages.replaceChildren(...items);
    this.el.empty.hidden = items.length > 0;
    this.el.earlier.hidden = !this.hasMore;

    const editArea = this.editing ? this.el.messages.querySelector(".edit-input") : null;
    const again = focusKey ? this.el.messages.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`) : null;
    if (again) again.focus();
    else if (editArea && (focusKey || document.activeElement === document.body)) editArea.focus();
    if (stick || (wasNearBottom && !keepScroll)) scroller.scrollTop = scroller.scrollHeight;
    else scroller.scrollTop = top;
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

  renderMessage(message, isLast) {
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
    const bubble = h("div", { class: "bubble" }, h("div", { class: "msg-text" }, renderText(message.text)));
    const note = isUser ? null : this.statusNote(message.status, message.error);
    if (note) bubble.append(note);
    item.append(bubble);

    const tools = h("div", { class: "msg-tools" });
    if (message.versions && message.versions.count > 1) tools.append(this.renderVersions(message));
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
    if (isUser && isLast && !liveBusy && ["stopped", "error"].includes(message.run_state)) {
      item.append(h("p", { class: "status-note status-stopped", text: message.run_state === "stopped" ? "Stopped before an answer." : "No answer: the run failed." }));
    }
    if (tools.childElementCount) item.append(tools);
    return item;
  }

  renderVersions(message) {
    const { index, count, ids } = message.versions;
    const go = (target) => () => this.operate({ type: "switch", message_id: target });
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
        onclick: go(ids[index - 2]),
      }),
      h("span", { class: "versions-label", "aria-label": `Version ${index} of ${count}`, text: `${index}/${count}` }),
      h("button", {
        type: "button",
        class: "tool tool-arrow",
        text: "›",
        "aria-label": "Next version",
        "data-focus-key": `next:${message.id}`,
        disabled: index >= count || liveBusy,
        onclick: go(ids[index]),
      }),
    );
  }

  renderEditor(message) {
    const area = h("textarea", { class: "edit-input input", rows: "3", "aria-label": "Edit your message", maxlength: "50000" });
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

  renderDraft(run) {
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

// --- the Memory panel ---------------------------------------------------------------------------

class MemoryPanel {
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
      this.status.textContent = this.query
        ? `${this.items.length} match${this.items.length === 1 ? "" : "es"} for “${this.query}”${page.degraded ? " (keyword search only)" : ""}.`
        : this.items.length
          ? ""
          : "Nothing remembered yet. Ask “remember that …”.";
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
    if (item.title) li.append(h("p", { class: "memory-title", text: item.title }));
    li.append(h("p", { class: "memory-content", text: item.content }));
    const meta = h("p", { class: "memory-meta" });
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
    if (!edit || !edit.text.trim()) return;
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

// --- the Notes and Context panels (both read the conversations list) ----------------------------

class ContextPanel {
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

// --- the workflow list --------------------------------------------------------------------------

function workflowsPage(root) {
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

// --- boot ---------------------------------------------------------------------------------------

function boot() {
  const chatRoot = document.querySelector('[data-page="chat"]');
  if (chatRoot) {
    const page = new ChatPage(chatRoot);
    page.context.bind();
    page.start();
    return;
  }
  const list = document.querySelector('[data-page="workflows"]');
  if (list) workflowsPage(list);
}

boot();
