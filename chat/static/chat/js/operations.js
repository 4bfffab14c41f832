// The owner's operations on the chat (docs/chat-protocol.md): history and earlier pages, send, stop,
// edit, retry, switch, feedback and New chat. Each sends its frame, hands the answer to the protocol
// state and redraws; a refusal is announced and, for a changed chat, the latest is fetched.

import { api } from "./api.js";
import { HISTORY_PAGE, MAX_MESSAGE_CHARS } from "./chat-state.js";
import { confirmAction, debounce } from "./dom.js";

export class ChatOperations {
  constructor(page) {
    this.page = page;
    this.loadingEarlier = false;
    this.refetchHistory = debounce(() => this.history(), 60);
  }

  get socket() {
    return this.page.socket;
  }

  get state() {
    return this.page.state;
  }

  async history() {
    const page = this.page;
    if (!this.socket.open) return;
    try {
      const frame = await this.socket.request({ type: "history", limit: this.state.historyLimit() }, "thread");
      page.onFrame(frame);
    } catch {
      // the reconnect's thread frame brings it back
    }
  }

  async loadEarlier() {
    const { page, state } = this;
    if (this.loadingEarlier || !state.hasMore || !state.path.length || !this.socket.open) return;
    this.loadingEarlier = true;
    page.el.earlier.textContent = "Loading…";
    const scroller = page.el.scroller;
    const before = scroller.scrollHeight - scroller.scrollTop;
    try {
      const frame = await this.socket.request({ type: "history", before: state.path[0].id, limit: HISTORY_PAGE }, "thread");
      state.prependEarlier(frame);
      page.render({ keepScroll: false });
      scroller.scrollTop = scroller.scrollHeight - before;
    } catch (error) {
      page.announce(error.message || "Could not load earlier messages.", true);
    } finally {
      this.loadingEarlier = false;
      page.el.earlier.textContent = "Load earlier messages";
    }
  }

  // The resume a reconnect asks for (chat-state.js `startResume`): its snapshot goes through the state.
  resume({ runId, afterSeq }) {
    this.socket
      .request({ type: "resume", run_id: runId, after_seq: afterSeq }, "run.snapshot")
      .then((snapshot) => this.page.onFrame(snapshot))
      .catch((error) => this.page.apply(this.state.resumeFailed(runId, error)));
  }

  async send() {
    const { page, state } = this;
    const composer = page.composer;
    if (!composer.text.trim() || !composer.canSend()) return;
    const text = composer.take();
    const clientId = `c-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
    state.sendStarted(clientId, text);
    page.render({ stick: true });
    composer.update();
    try {
      const ack = await this.socket.request({ type: "send", text, client_message_id: clientId });
      state.accepted(ack);
      composer.update();
      this.refetchHistory();
    } catch (error) {
      state.sendFailed();
      composer.restore(text);
      page.render();
      page.announce(error.message || "The message was not sent.", true);
    }
    composer.update();
    composer.focus();
  }

  async stop() {
    const { page, state } = this;
    const runId = state.stopStarted();
    if (!runId) return;
    page.composer.update();
    try {
      await this.socket.request({ type: "stop", run_id: runId });
    } catch (error) {
      state.stopFailed();
      if (error.code !== "not_stoppable") page.announce(error.message || "Could not stop.", true);
      page.composer.update();
    }
  }

  // Edit, retry and switch: sent against the revision on screen.
  async operate(frame, { focusComposer = false } = {}) {
    const page = this.page;
    try {
      const ack = await this.socket.request({ ...frame, expected_revision: this.state.revision });
      this.state.accepted(ack);
      page.composer.update();
      await this.history();
      if (focusComposer) page.composer.focus();
      return true;
    } catch (error) {
      page.list.anchor = null;
      if (error.code === "revision_conflict") {
        page.announce("The chat changed elsewhere; showing the latest.", true);
        await this.history();
      } else {
        page.announce(error.message || "That did not work.", true);
      }
      return false;
    }
  }

  retry(message) {
    return this.operate({ type: "retry", message_id: message.id }, { focusComposer: true });
  }

  // Keep the switched message in view, and focus on the same arrow of its new version.
  switchTo(target, key) {
    this.page.list.anchor = { id: target, focusKey: `${key}:${target}` };
    return this.operate({ type: "switch", message_id: target });
  }

  async saveEdit(messageId) {
    const page = this.page;
    const text = page.editing ? page.editing.text : "";
    if (!text.trim()) return;
    if (text.length > MAX_MESSAGE_CHARS) {
      const over = text.length - MAX_MESSAGE_CHARS;
      page.announce(
        `The edited message is ${over.toLocaleString()} characters over the ${MAX_MESSAGE_CHARS.toLocaleString()}-character limit; shorten it to save.`,
        true,
      );
      return;
    }
    const ok = await this.operate({ type: "edit", message_id: messageId, text });
    if (ok) {
      page.editing = null;
      page.render({ stick: true });
      page.composer.focus();
    }
  }

  async feedback(message, value) {
    const page = this.page;
    const next = this.state.nextFeedback(message, value);
    try {
      const ack = await this.socket.request({ type: "feedback", message_id: message.id, value: next });
      this.state.setFeedback(message.id, ack.feedback ?? next);
      page.render({ keepScroll: true });
      page.announce(next ? `Marked as ${next === "up" ? "helpful" : "not helpful"}.` : "Feedback removed.");
    } catch (error) {
      page.announce(error.message || "Feedback was not saved.", true);
    }
  }

  async newChat() {
    const page = this.page;
    const ok = await confirmAction({
      title: "Start a new chat?",
      text: "This chat is kept under Chats, read-only, with its ratings. The agent starts with a new mind: its Context and working notes for this generation are cleared. Memory stays.",
      ok: "Start a new chat",
    });
    if (!ok) return;
    try {
      await api("POST", `${page.apiBase}/chat/archive`);
      this.state.clear();
      page.editing = null;
      if (page.archived) page.chats.showCurrent();
      page.render();
      page.composer.update();
      await this.history();
      page.context.refresh();
      await page.chats.load();
      page.announce("New chat started. The previous one is under Chats; Memory was kept.");
      page.composer.focus();
    } catch (error) {
      page.announce(error.message || "Could not start a new chat.", true);
    }
  }
}
