// The chat page's protocol state (docs/chat-protocol.md): the thread on screen, the live runs and their
// per-run event order, resume after a reconnect, the pending send, Stop and versions.
//
// No DOM and no socket here, so it runs under `node --test` (tests/js/). Each server frame goes through
// `receive`, which updates the state and returns the effects the page must carry out (render, paint a
// draft, send a resume, refetch the history, refresh a panel, announce); the page owns the DOM and the
// socket. `link` describes the socket a frame came on: {id, open} (id changes on every reconnect).

export const HISTORY_PAGE = 50;
export const MAX_MESSAGE_CHARS = 50000; // the server's limit (chat.services.MAX_MESSAGE_CHARS)

const TERMINAL = { "run.finished": "finished", "run.stopped": "stopped", "run.error": "error" };
const RUN_EVENTS = new Set(["run.started", "run.delta", "run.step", ...Object.keys(TERMINAL)]);
const ENDED = new Set(["finished", "stopped", "error"]);
const SAID = { finished: "Answer complete.", stopped: "Answer stopped.", error: "The answer failed." };
const CLOSED = { id: null, open: false };

export function isTerminal(type) {
  return type in TERMINAL;
}

export class ChatState {
  constructor({ generation = 0, memoryId = "", cannotAnswer = "" } = {}) {
    this.generation = Number(generation) || 0;
    this.memoryId = memoryId || "";
    this.cannotAnswer = cannotAnswer || ""; // why the agent cannot answer now ("" when it can)
    this.path = [];
    this.marks = [];
    this.hasMore = false;
    this.revision = 0;
    this.runs = new Map(); // run_id → {id, seq, text, state, steps, buffer, resuming, resumedOn, userMessageId, replyId, error}
    this.liveRunId = null;
    this.pendingSend = null; // {clientId, text}
    this.stopping = false;
  }

  // --- server frames ---

  receive(frame, link = CLOSED) {
    const type = frame?.type;
    if (RUN_EVENTS.has(type)) {
      const effects = this.applyRunEvent(frame, link);
      // the Context ledger has the run's calls once it ends
      if (isTerminal(type)) effects.push({ type: "context" });
      return effects;
    }
    switch (type) {
      case "thread":
        return this.applyThread(frame, link);
      case "thread.updated":
        return [{ type: "history" }, { type: "chats" }];
      case "chats.updated":
        return [{ type: "chats" }];
      case "run.snapshot":
        return this.applySnapshot(frame);
      case "context.updated":
        // a Clear (length 0): the chat shows its mark once the thread is refetched
        return frame.length === 0 ? [{ type: "context" }, { type: "history" }] : [{ type: "context" }];
      case "memory.updated":
        return !frame.memory_node_id || frame.memory_node_id === this.memoryId ? [{ type: "memory" }] : [];
      case "workflow.deployed":
      case "workflow.reset": {
        // a deploy admits only a graph that can answer
        if (type === "workflow.deployed") this.cannotAnswer = "";
        const effects = [];
        if (frame.generation !== undefined) effects.push(...this.setGeneration(frame.generation));
        effects.push({ type: "connection" }, { type: "history" }, { type: "context" });
        return effects;
      }
      case "workflow.deleted":
        return [{ type: "gone" }];
      case "error":
        return [{ type: "announce", text: frame.message || "Something went wrong.", error: true }];
      default:
        return [];
    }
  }

  setGeneration(generation) {
    this.generation = Number(generation) || 0;
    return [{ type: "generation" }];
  }

  // A `thread` frame: the path, marks and revision replace ours; its active runs are synced.
  applyThread(frame, link = CLOSED) {
    const effects = [];
    if (frame.generation !== undefined && frame.generation !== this.generation) {
      effects.push(...this.setGeneration(frame.generation));
    }
    this.revision = frame.revision ?? this.revision;
    this.path = frame.path || [];
    this.marks = frame.marks || [];
    this.hasMore = Boolean(frame.has_more);
    // a thread nobody asked for is the one sent on connect: events may have been missed before it
    effects.push(...this.syncActiveRuns(frame.active_runs || [], frame.request_id == null, link));
    if (this.pendingSend && this.path.some((m) => m.client_message_id === this.pendingSend.clientId)) {
      this.pendingSend = null;
    }
    effects.push({ type: "render" }, { type: "composer" });
    return effects;
  }

  // Runs the thread says are live. A run we thought live that is not listed has ended (its answer is
  // in the path); a listed run is resumed once per socket when we may have missed its events.
  syncActiveRuns(activeRuns, fromConnect, link = CLOSED) {
    const effects = [];
    const listed = new Set(activeRuns.map((r) => r.run_id));
    for (const run of this.runs.values()) {
      if (run.state === "live" && !listed.has(run.id) && !run.resuming) run.state = "finished";
    }
    for (const info of activeRuns) {
      const run = this.ensureRun(info.run_id, info);
      const stale = fromConnect || run.seq === 0;
      if (run.state === "live" && stale && run.resumedOn !== link.id && link.open) effects.push(this.startResume(run, link));
    }
    this.findLiveRun();
    return effects;
  }

  findLiveRun() {
    this.liveRunId = null;
    for (const run of this.runs.values()) if (run.state === "live") this.liveRunId = run.id;
    if (!this.liveRunId) this.stopping = false;
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

  // The page sends `resume {run_id, after_seq}` for this effect and hands the answer to `receive`
  // (a `run.snapshot`) or its refusal to `resumeFailed`.
  startResume(run, link) {
    run.resuming = true;
    run.resumedOn = link.id;
    return { type: "resume", runId: run.id, afterSeq: run.seq };
  }

  resumeFailed(runId, error) {
    const run = this.runs.get(runId);
    if (!run) return [];
    run.resuming = false;
    if (error && error.code === "not_found") {
      run.state = "finished";
      this.findLiveRun();
      return [{ type: "history" }, { type: "composer" }];
    }
    return [];
  }

  applySnapshot(snapshot) {
    const run = this.runs.get(snapshot.run_id);
    if (!run || run.state !== "live") return [];
    run.resuming = false;
    if (snapshot.seq > run.seq) {
      run.seq = snapshot.seq;
      run.text = snapshot.text || "";
      run.steps = Array.isArray(snapshot.steps) ? snapshot.steps : run.steps;
    }
    run.userMessageId = run.userMessageId || snapshot.user_message_id || null;
    if (ENDED.has(snapshot.state)) return this.endRun(run, snapshot.state, snapshot.text, snapshot.error);
    this.drain(run);
    return [{ type: "draft", runId: run.id }];
  }

  applyRunEvent(event, link = CLOSED) {
    const run = this.ensureRun(event.run_id, event);
    if (run.state !== "live") return [];
    if (isTerminal(event.type)) {
      run.seq = Math.max(run.seq, event.seq || 0);
      const error = event.type === "run.error" ? { code: event.code, message: event.message } : null;
      return this.endRun(run, TERMINAL[event.type], event.text, error, event.reply_message_id);
    }
    const seq = event.seq || 0;
    if (seq <= run.seq) return [];
    if (run.resuming || seq > run.seq + 1) {
      // a gap: keep the event until the snapshot (or the missing events) arrive
      run.buffer.set(seq, event);
      return !run.resuming && link.open ? [this.startResume(run, link)] : [];
    }
    this.applyOne(run, event);
    this.drain(run);
    return [{ type: "draft", runId: run.id }];
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

  // Buffered events that now follow on, in order; stops at the next gap.
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
    return [{ type: "announce", text: SAID[state] }, { type: "render" }, { type: "composer" }, { type: "history" }];
  }

  // --- the owner's operations ---

  sendStarted(clientId, text) {
    this.pendingSend = { clientId, text };
  }

  sendFailed() {
    this.pendingSend = null;
  }

  // An `ack` for send, edit or retry: its run is live from now on.
  accepted(ack) {
    if (ack.run_id) this.ensureRun(ack.run_id, { user_message_id: ack.message_id });
    this.revision = ack.revision ?? this.revision;
  }

  // The run Stop applies to, or null; Stop says "Stopping…" until the run ends or the stop is refused.
  stopStarted() {
    if (!this.liveRunId) return null;
    this.stopping = true;
    return this.liveRunId;
  }

  stopFailed() {
    this.stopping = false;
  }

  // The message a version arrow moves to (step -1: previous, +1: next), or null past either end.
  versionTarget(message, step) {
    const versions = message.versions;
    if (!versions || !Array.isArray(versions.ids)) return null;
    const index = versions.index - 1 + step;
    return index >= 0 && index < versions.ids.length ? versions.ids[index] : null;
  }

  // Pressing the rating a message already has removes it.
  nextFeedback(message, value) {
    return message.feedback === value ? null : value;
  }

  setFeedback(messageId, value) {
    const message = this.path.find((m) => m.id === messageId);
    if (message) message.feedback = value;
  }

  // A page of older messages (`history {before}`), placed before the ones on screen.
  prependEarlier(frame) {
    const known = new Set(this.path.map((m) => m.id));
    const older = (frame.path || []).filter((m) => !known.has(m.id));
    this.path = [...older, ...this.path];
    this.hasMore = Boolean(frame.has_more);
  }

  historyLimit() {
    return Math.min(200, Math.max(HISTORY_PAGE, this.path.length + 2));
  }

  // New chat: the current chat is archived and nothing of it stays on screen.
  clear() {
    this.runs.clear();
    this.liveRunId = null;
    this.stopping = false;
    this.pendingSend = null;
    this.path = [];
    this.marks = [];
    this.hasMore = false;
  }

  // Why the composer cannot send now ("" when it can).
  sendBlockedReason({ open, transferred = false, length = 0 }) {
    if (this.generation <= 0) return "This workflow is not deployed.";
    if (transferred) return "This workflow was transferred to another owner.";
    if (!open) return "Reconnecting… you can send once the connection is back.";
    if (this.cannotAnswer) return this.cannotAnswer;
    if (this.liveRunId) return this.stopping ? "Stopping the answer…" : "The agent is answering. Wait, or press Stop.";
    if (length > MAX_MESSAGE_CHARS) {
      const over = length - MAX_MESSAGE_CHARS;
      return `Too long to send: shorten it by ${over.toLocaleString()} character${over === 1 ? "" : "s"}.`;
    }
    return "";
  }

  // --- what the current chat shows, in order: each item has a key that stays the same across renders ---

  items() {
    const items = [];
    const lastIndex = this.path.length - 1;
    const marksAfter = (id) =>
      this.marks
        .filter((mark) => mark.after_id === id)
        .map((mark) => ({ key: `mark:${mark.kind}:${mark.after_id}:${mark.at}`, kind: "mark", mark }));
    if (!this.hasMore) items.push(...marksAfter(null));
    this.path.forEach((message, index) => {
      items.push({ key: `msg:${message.id}`, kind: "message", message, isLast: index === lastIndex });
      items.push(...marksAfter(message.id));
    });
    if (this.pendingSend && !this.path.some((m) => m.client_message_id === this.pendingSend.clientId)) {
      items.push({ key: `pending:${this.pendingSend.clientId}`, kind: "pending", text: this.pendingSend.text });
    }
    const lastId = lastIndex >= 0 ? this.path[lastIndex].id : null;
    for (const run of this.runs.values()) {
      if (run.replyId && this.path.some((m) => m.id === run.replyId)) continue;
      const answersHere = run.userMessageId && run.userMessageId === lastId;
      if (run.state === "live" || (answersHere && (run.text || run.error))) {
        items.push({ key: `run:${run.id}`, kind: "draft", run });
      }
    }
    return items;
  }
}
