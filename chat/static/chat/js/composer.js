// The chat's composer: the message box, Send and Stop, the character counter and why it cannot send.
// What it may do comes from the protocol state (chat-state.js); sending and stopping are operations.

import { MAX_MESSAGE_CHARS } from "./chat-state.js";

const COUNTER_FROM = 45000; // the character counter shows from here on

export class Composer {
  // page: the ChatPage (its state, socket, connection state, archived view, announce);
  // onSend / onStop: the operations behind the buttons.
  constructor(page, { onSend, onStop }) {
    this.page = page;
    this.onSend = onSend;
    this.onStop = onStop;
    this.form = document.getElementById("composer");
    this.input = document.getElementById("composer-input");
    this.sendButton = document.getElementById("send");
    this.stopButton = document.getElementById("stop");
    this.reason = document.getElementById("composer-reason");
    this.count = document.getElementById("composer-count");
  }

  get text() {
    return this.input.value;
  }

  canSend() {
    const page = this.page;
    return page.socket.open && !page.state.liveRunId && page.state.generation > 0 && this.text.length <= MAX_MESSAGE_CHARS;
  }

  blockedReason() {
    return this.page.state.sendBlockedReason({
      open: this.page.socket.open,
      transferred: this.page.connState === "transferred",
      length: this.text.length,
    });
  }

  // Empties the box for a message being sent; `restore` puts it back when the send failed.
  take() {
    const text = this.input.value;
    this.input.value = "";
    this.autosize();
    return text;
  }

  restore(text) {
    if (!this.input.value) this.input.value = text;
    this.autosize();
  }

  focus() {
    this.input.focus();
  }

  update() {
    const { state, socket, archived } = this.page;
    this.form.hidden = Boolean(archived);
    const reason = this.blockedReason();
    this.sendButton.disabled = Boolean(reason);
    this.reason.textContent = reason;
    this.updateCount();
    const live = Boolean(state.liveRunId);
    this.stopButton.hidden = !live;
    this.stopButton.disabled = state.stopping || !socket.open;
    this.stopButton.textContent = state.stopping ? "Stopping…" : "Stop";
    this.sendButton.hidden = live;
    if (!live && !archived && document.activeElement === document.body) this.input.focus();
  }

  updateCount() {
    const length = this.text.length;
    this.count.hidden = length < COUNTER_FROM;
    this.count.textContent = `${length.toLocaleString()} / ${MAX_MESSAGE_CHARS.toLocaleString()}`;
    this.count.dataset.over = String(length > MAX_MESSAGE_CHARS);
  }

  autosize() {
    const input = this.input;
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight, 240)}px`;
  }

  // A paste that makes the message too long is kept whole and said so; it is never cut silently.
  onPaste(event) {
    const pasted = event.clipboardData?.getData("text") ?? "";
    const input = this.input;
    const after = input.value.length - (input.selectionEnd - input.selectionStart) + pasted.length;
    if (after > MAX_MESSAGE_CHARS) {
      this.page.announce(
        `The pasted text makes the message ${after.toLocaleString()} characters long; a message may hold at most ${MAX_MESSAGE_CHARS.toLocaleString()}. Shorten it before sending.`,
        true,
      );
    }
  }

  bind() {
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.onSend();
    });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        if (this.canSend()) this.onSend();
        else this.page.announce(this.blockedReason());
      }
    });
    this.input.addEventListener("input", () => {
      this.autosize();
      this.update();
    });
    this.input.addEventListener("paste", (event) => this.onPaste(event));
    this.stopButton.addEventListener("click", () => this.onStop());
  }
}
