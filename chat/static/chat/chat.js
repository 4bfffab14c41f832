// The owner's pages: the workflow list and the chat with its Notes, Memory and Context panels.
//
// ES modules, no build step. Text from messages and Memory is only ever placed with textContent or
// text nodes (js/render.js); no HTML from the server or the agent is interpreted.
// The websocket protocol is docs/chat-protocol.md.

import { ChatPage } from "./js/page.js";
import { workflowsPage } from "./js/workflows.js";

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
