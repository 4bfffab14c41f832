// The chat websocket: reconnects with backoff, pairs answers with requests (docs/chat-protocol.md).

const RECONNECT_MAX_MS = 5000;
const CLOSE_SERVER_RESTARTING = 4012;
const RESTART_RECONNECT_MS = 500;

export class ChatSocket {
  constructor(url, { onFrame, onState }) {
    this.url = url;
    this.onFrame = onFrame;
    this.onState = onState;
    this.pending = new Map();
    this.nextId = 1;
    this.attempt = 0;
    this.ws = null;
    this.closedForGood = false;
    // Set by a 4012 close: the attempts that follow are still "the server is restarting" until one opens.
    this.restarting = false;
  }

  get open() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  connect() {
    if (this.restarting) this.onState("restarting", this.attempt);
    else this.onState(this.attempt === 0 ? "connecting" : "reconnecting", this.attempt);
    const ws = new WebSocket(this.url);
    this.ws = ws;
    ws.addEventListener("open", () => {
      this.attempt = 0;
      this.restarting = false;
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
      if (event.code === 4410) {
        this.closedForGood = true;
        this.onState("transferred", 0);
        return;
      }
      if (this.closedForGood) return;
      if (event.code === CLOSE_SERVER_RESTARTING) {
        // The server is shutting down: reconnect soon (to another server, or to it restarted).
        this.attempt = 0;
        this.restarting = true;
        this.onState("restarting", 0);
        setTimeout(() => this.connect(), RESTART_RECONNECT_MS);
        return;
      }
      this.attempt += 1;
      this.onState(this.restarting ? "restarting" : "reconnecting", this.attempt);
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
