// The chat page's protocol state under `node --test` (chat/static/chat/js/chat-state.js): each server
// frame in, the state and the effects the page must carry out checked out.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { ChatState, MAX_MESSAGE_CHARS } from "../../chat/static/chat/js/chat-state.js";

const OPEN = { id: "socket-1", open: true };
const REOPENED = { id: "socket-2", open: true };
const CLOSED = { id: null, open: false };

const types = (effects) => effects.map((e) => e.type);
const resumes = (effects) => effects.filter((e) => e.type === "resume");

function message(id, role, extra = {}) {
  return { id, role, kind: "text", status: "complete", text: `text of ${id}`, editable: true, ...extra };
}

function thread(extra = {}) {
  return { type: "thread", generation: 1, revision: 3, path: [], has_more: false, active_runs: [], marks: [], ...extra };
}

// A state with a live run that has applied `run.started` (seq 1).
function streaming() {
  const state = new ChatState({ generation: 1, memoryId: "memory-1" });
  state.receive(thread({ request_id: "r1", path: [message("m1", "user")] }), OPEN);
  state.receive({ type: "run.started", run_id: "run1", seq: 1, user_message_id: "m1", reply_message_id: "a1" }, OPEN);
  return state;
}

const delta = (seq, text, runId = "run1") => ({ type: "run.delta", run_id: runId, seq, delta: text });

describe("stream", () => {
  test("deltas in order build the answer and each asks for the draft to be painted", () => {
    const state = streaming();
    assert.deepEqual(state.receive(delta(2, "Hel"), OPEN), [{ type: "draft", runId: "run1" }]);
    state.receive(delta(3, "lo"), OPEN);
    const run = state.runs.get("run1");
    assert.equal(run.text, "Hello");
    assert.equal(run.seq, 3);
    assert.equal(run.userMessageId, "m1");
    assert.equal(run.replyId, "a1");
    assert.equal(state.liveRunId, "run1");
  });

  test("an event already applied is ignored, not appended twice", () => {
    const state = streaming();
    state.receive(delta(2, "Hel"), OPEN);
    assert.deepEqual(state.receive(delta(2, "Hel"), OPEN), []);
    assert.deepEqual(state.receive(delta(1, "x"), OPEN), []);
    assert.equal(state.runs.get("run1").text, "Hel");
  });

  test("an event past a gap is kept until the missing one arrives, then both apply in order", () => {
    const state = streaming();
    const effects = state.receive(delta(3, "lo"), OPEN);
    assert.deepEqual(resumes(effects), [{ type: "resume", runId: "run1", afterSeq: 1 }]);
    assert.equal(state.runs.get("run1").text, "");
    state.resumeFailed("run1", { code: "disconnected" }); // the resume went nowhere; the event itself arrives
    state.receive(delta(2, "Hel"), OPEN);
    assert.equal(state.runs.get("run1").text, "Hello");
    assert.equal(state.runs.get("run1").seq, 3);
    assert.equal(state.runs.get("run1").buffer.size, 0);
  });

  test("filling one gap applies what follows it and keeps what lies past the next gap", () => {
    const state = streaming();
    state.receive(delta(3, "b"), CLOSED);
    state.receive(delta(5, "d"), CLOSED);
    state.receive(delta(2, "a"), CLOSED);
    const run = state.runs.get("run1");
    assert.equal(run.text, "ab");
    assert.equal(run.seq, 3);
    assert.deepEqual([...run.buffer.keys()], [5]);
    state.receive(delta(4, "c"), CLOSED);
    assert.equal(run.text, "abcd");
  });

  test("a gap on a closed socket is buffered without a resume", () => {
    const state = streaming();
    assert.deepEqual(state.receive(delta(4, "!"), CLOSED), []);
    assert.equal(state.runs.get("run1").buffer.size, 1);
  });

  test("steps replace the step with the same id and keep the others", () => {
    const state = streaming();
    state.receive({ type: "run.step", run_id: "run1", seq: 2, step: { id: "s1", name: "remember", state: "running" } }, OPEN);
    state.receive({ type: "run.step", run_id: "run1", seq: 3, step: { id: "s2", name: "recall", state: "running" } }, OPEN);
    state.receive({ type: "run.step", run_id: "run1", seq: 4, step: { id: "s1", name: "remember", state: "done" } }, OPEN);
    assert.deepEqual(
      state.runs.get("run1").steps.map((s) => `${s.id}:${s.state}`),
      ["s1:done", "s2:running"],
    );
  });

  test("run.finished ends the run with the whole text, announces, renders, refreshes Context and refetches", () => {
    const state = streaming();
    state.receive(delta(2, "Hel"), OPEN);
    const effects = state.receive({ type: "run.finished", run_id: "run1", seq: 9, reply_message_id: "a1", text: "Hello there" }, OPEN);
    assert.deepEqual(types(effects), ["announce", "render", "composer", "history", "context"]);
    assert.equal(effects[0].text, "Answer complete.");
    const run = state.runs.get("run1");
    assert.equal(run.state, "finished");
    assert.equal(run.text, "Hello there");
    assert.equal(run.seq, 9);
    assert.equal(state.liveRunId, null);
    assert.deepEqual(state.receive(delta(10, "late"), OPEN), []);
    assert.equal(run.text, "Hello there");
  });

  test("run.error keeps its code and message", () => {
    const state = streaming();
    state.receive({ type: "run.error", run_id: "run1", seq: 2, code: "context_changed", message: "Cleared.", text: "" }, OPEN);
    const run = state.runs.get("run1");
    assert.equal(run.state, "error");
    assert.deepEqual(run.error, { code: "context_changed", message: "Cleared." });
  });

  test("the draft shows after the question until the answer is in the path", () => {
    const state = streaming();
    state.receive(delta(2, "Hi"), OPEN);
    assert.deepEqual(
      state.items().map((i) => i.key),
      ["msg:m1", "run:run1"],
    );
    state.receive({ type: "run.finished", run_id: "run1", seq: 3, reply_message_id: "a1", text: "Hi" }, OPEN);
    state.receive(thread({ request_id: "r2", path: [message("m1", "user"), message("a1", "assistant")] }), OPEN);
    assert.deepEqual(
      state.items().map((i) => i.key),
      ["msg:m1", "msg:a1"],
    );
    assert.deepEqual(
      state.items().map((i) => i.isLast),
      [false, true],
    );
  });
});

describe("resume", () => {
  test("the thread sent on connect resumes each live run it lists, once per socket", () => {
    const state = new ChatState({ generation: 1 });
    const connect = thread({ active_runs: [{ run_id: "run1", user_message_id: "m1" }], path: [message("m1", "user")] });
    assert.deepEqual(resumes(state.receive(connect, OPEN)), [{ type: "resume", runId: "run1", afterSeq: 0 }]);
    assert.equal(state.runs.get("run1").resuming, true);
    assert.equal(state.liveRunId, "run1");
    // the same socket's refetch does not resume again
    state.receive({ type: "run.snapshot", run_id: "run1", state: "running", seq: 4, text: "abcd", steps: [] }, OPEN);
    assert.deepEqual(resumes(state.receive({ ...connect, request_id: "r5" }, OPEN)), []);
    // a new socket's connect thread does
    assert.deepEqual(resumes(state.receive(connect, REOPENED)), [{ type: "resume", runId: "run1", afterSeq: 4 }]);
  });

  test("a second connect thread on the same socket does not resume the run again", () => {
    const state = new ChatState({ generation: 1 });
    const connect = thread({ active_runs: [{ run_id: "run1" }] });
    state.receive(connect, OPEN);
    state.receive({ type: "run.snapshot", run_id: "run1", state: "running", seq: 2, text: "ab", steps: [] }, OPEN);
    assert.deepEqual(resumes(state.receive(connect, OPEN)), []);
  });

  test("no resume is asked on a socket that is not open", () => {
    const state = new ChatState({ generation: 1 });
    const effects = state.receive(thread({ active_runs: [{ run_id: "run1" }] }), CLOSED);
    assert.deepEqual(resumes(effects), []);
  });

  test("the snapshot replaces the draft, then only later events apply (no text lost or doubled)", () => {
    const state = streaming();
    state.receive(delta(2, "ab"), OPEN);
    state.receive(delta(5, "ef"), OPEN); // gap: resume asked, event kept
    assert.equal(state.runs.get("run1").resuming, true);
    state.receive(delta(6, "gh"), OPEN); // still resuming: kept too
    const effects = state.receive({ type: "run.snapshot", run_id: "run1", state: "running", seq: 4, text: "abcd", steps: [] }, OPEN);
    assert.deepEqual(effects, [{ type: "draft", runId: "run1" }]);
    const run = state.runs.get("run1");
    assert.equal(run.text, "abcdefgh");
    assert.equal(run.seq, 6);
    assert.equal(run.resuming, false);
    state.receive(delta(4, "cd"), OPEN);
    assert.equal(run.text, "abcdefgh");
  });

  test("a snapshot behind what the page has leaves the draft as it is", () => {
    const state = streaming();
    state.receive(delta(2, "ab"), OPEN);
    state.receive(delta(3, "cd"), OPEN);
    state.receive({ type: "run.snapshot", run_id: "run1", state: "running", seq: 2, text: "ab", steps: [] }, OPEN);
    assert.equal(state.runs.get("run1").text, "abcd");
    assert.equal(state.runs.get("run1").seq, 3);
  });

  test("a snapshot of an ended run ends it with the snapshot's text", () => {
    const state = streaming();
    const effects = state.receive({ type: "run.snapshot", run_id: "run1", state: "stopped", seq: 7, text: "partial" }, OPEN);
    assert.ok(types(effects).includes("render"));
    const run = state.runs.get("run1");
    assert.equal(run.state, "stopped");
    assert.equal(run.text, "partial");
    assert.equal(state.liveRunId, null);
  });

  test("a run the server no longer knows ends and the thread is refetched", () => {
    const state = streaming();
    state.receive(thread({ active_runs: [{ run_id: "run1" }], path: [message("m1", "user")] }), REOPENED);
    assert.deepEqual(types(state.resumeFailed("run1", { code: "not_found" })), ["history", "composer"]);
    assert.equal(state.runs.get("run1").state, "finished");
    assert.equal(state.liveRunId, null);
  });

  test("a live run the thread no longer lists has ended", () => {
    const state = streaming();
    state.receive(thread({ request_id: "r3", active_runs: [], path: [message("m1", "user"), message("a1", "assistant")] }), OPEN);
    assert.equal(state.runs.get("run1").state, "finished");
    assert.equal(state.liveRunId, null);
  });
});

describe("versions", () => {
  const edited = () =>
    thread({
      request_id: "r1",
      revision: 7,
      path: [
        message("m2", "user", { versions: { index: 2, count: 3, ids: ["m1", "m2", "m3"] } }),
        message("a2", "assistant", { feedback: "up" }),
      ],
    });

  test("a thread replaces the path and the revision", () => {
    const state = new ChatState({ generation: 1 });
    state.receive(thread({ path: [message("old", "user")], revision: 2 }), OPEN);
    state.receive(edited(), OPEN);
    assert.deepEqual(
      state.path.map((m) => m.id),
      ["m2", "a2"],
    );
    assert.equal(state.revision, 7);
  });

  test("the arrows move to the neighbouring version and stop at either end", () => {
    const state = new ChatState({ generation: 1 });
    state.receive(edited(), OPEN);
    const [question] = state.path;
    assert.equal(state.versionTarget(question, -1), "m1");
    assert.equal(state.versionTarget(question, 1), "m3");
    assert.equal(state.versionTarget({ versions: { index: 1, count: 3, ids: ["m1", "m2", "m3"] } }, -1), null);
    assert.equal(state.versionTarget({ versions: { index: 3, count: 3, ids: ["m1", "m2", "m3"] } }, 1), null);
  });

  test("an ack's revision is the one the next operation expects", () => {
    const state = new ChatState({ generation: 1 });
    state.receive(edited(), OPEN);
    state.accepted({ message_id: "m4", run_id: "run9", revision: 8 });
    assert.equal(state.revision, 8);
    assert.equal(state.liveRunId, "run9");
    assert.equal(state.runs.get("run9").userMessageId, "m4");
    state.accepted({ leaf_id: "a2", changed: false });
    assert.equal(state.revision, 8);
  });

  test("pressing the rating a message has removes it", () => {
    const state = new ChatState({ generation: 1 });
    state.receive(edited(), OPEN);
    const answer = state.path[1];
    assert.equal(state.nextFeedback(answer, "up"), null);
    assert.equal(state.nextFeedback(answer, "down"), "down");
    state.setFeedback("a2", null);
    assert.equal(state.path[1].feedback, null);
  });

  test("older pages go before the path without repeating a message", () => {
    const state = new ChatState({ generation: 1 });
    state.receive(thread({ path: [message("m3", "user")], has_more: true }), OPEN);
    state.prependEarlier({ path: [message("m1", "user"), message("m3", "user")], has_more: false });
    assert.deepEqual(
      state.path.map((m) => m.id),
      ["m1", "m3"],
    );
    assert.equal(state.hasMore, false);
  });

  test("marks sit after the message they follow, the ones before the first only on the first page", () => {
    const state = new ChatState({ generation: 1 });
    const marks = [
      { kind: "context_cleared", after_id: null, at: "t0" },
      { kind: "context_summarized", after_id: "m1", at: "t1" },
    ];
    state.receive(thread({ path: [message("m1", "user"), message("a1", "assistant")], marks }), OPEN);
    assert.deepEqual(
      state.items().map((i) => i.kind),
      ["mark", "message", "mark", "message"],
    );
    state.receive(thread({ path: [message("m1", "user"), message("a1", "assistant")], marks, has_more: true }), OPEN);
    assert.deepEqual(
      state.items().map((i) => i.kind),
      ["message", "mark", "message"],
    );
  });
});

describe("stop", () => {
  test("Stop applies to the live run and says so until the run ends stopped", () => {
    const state = streaming();
    state.receive(delta(2, "partial"), OPEN);
    assert.equal(state.stopStarted(), "run1");
    assert.equal(state.sendBlockedReason({ open: true }), "Stopping the answer…");
    const effects = state.receive({ type: "run.stopped", run_id: "run1", seq: 3, reply_message_id: "a1", text: "partial" }, OPEN);
    assert.equal(effects[0].text, "Answer stopped.");
    assert.equal(state.runs.get("run1").state, "stopped");
    assert.equal(state.runs.get("run1").text, "partial");
    assert.equal(state.stopping, false);
    assert.equal(state.liveRunId, null);
    assert.equal(state.sendBlockedReason({ open: true }), "");
  });

  test("a refused stop frees the button again", () => {
    const state = streaming();
    state.stopStarted();
    state.stopFailed();
    assert.equal(state.stopping, false);
    assert.equal(state.sendBlockedReason({ open: true }), "The agent is answering. Wait, or press Stop.");
  });

  test("with no live run there is nothing to stop", () => {
    const state = new ChatState({ generation: 1 });
    assert.equal(state.stopStarted(), null);
    assert.equal(state.stopping, false);
  });

  test("a stop of a queued run that ends without text keeps the question answerable again", () => {
    const state = streaming();
    state.stopStarted();
    state.receive({ type: "run.stopped", run_id: "run1", seq: 2, reply_message_id: null, text: "" }, OPEN);
    const run = state.runs.get("run1");
    assert.equal(run.state, "stopped");
    assert.equal(run.replyId, "a1");
    // nothing to show under the question: no draft item for a run that stopped with no text
    assert.deepEqual(
      state.items().map((i) => i.kind),
      ["message"],
    );
  });
});

describe("other frames", () => {
  test("a Clear refreshes Context and refetches the thread for its mark; other changes only refresh", () => {
    const state = new ChatState({ generation: 1 });
    assert.deepEqual(types(state.receive({ type: "context.updated", length: 0 })), ["context", "history"]);
    assert.deepEqual(types(state.receive({ type: "context.updated", length: 5 })), ["context"]);
  });

  test("Memory refreshes for its own node only", () => {
    const state = new ChatState({ generation: 1, memoryId: "memory-1" });
    assert.deepEqual(types(state.receive({ type: "memory.updated", memory_node_id: "memory-1" })), ["memory"]);
    assert.deepEqual(types(state.receive({ type: "memory.updated", memory_node_id: "memory-2" })), []);
  });

  test("a deploy clears 'cannot answer' and moves to the new generation", () => {
    const state = new ChatState({ generation: 1, cannotAnswer: "No key." });
    const effects = state.receive({ type: "workflow.deployed", generation: 2 });
    assert.deepEqual(types(effects), ["generation", "connection", "history", "context"]);
    assert.equal(state.generation, 2);
    assert.equal(state.cannotAnswer, "");
  });

  test("a pending send leaves once the thread shows its message", () => {
    const state = new ChatState({ generation: 1 });
    state.sendStarted("c-1", "Hello");
    assert.deepEqual(
      state.items().map((i) => i.key),
      ["pending:c-1"],
    );
    state.receive(thread({ request_id: "r1", path: [message("m1", "user", { client_message_id: "c-1" })] }), OPEN);
    assert.equal(state.pendingSend, null);
  });

  test("the composer says why it cannot send", () => {
    const state = new ChatState({ generation: 0 });
    assert.equal(state.sendBlockedReason({ open: true }), "This workflow is not deployed.");
    state.setGeneration(1);
    assert.match(state.sendBlockedReason({ open: false }), /^Reconnecting/);
    assert.match(state.sendBlockedReason({ open: true, length: MAX_MESSAGE_CHARS + 2 }), /shorten it by 2 characters/);
  });
});
