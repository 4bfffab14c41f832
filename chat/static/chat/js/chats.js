// The Chats sidebar: the workflow's chats, newest first; an archived chat opens read-only (its address
// is ?chat=<id>, so a reload or the back button keeps it), and can be renamed or deleted for good.

import { api } from "./api.js";
import { confirmAction, debounce, h, timeNode } from "./dom.js";

const PAGE = 50;

export class ChatList {
  constructor(page, drawers) {
    this.page = page;
    this.drawers = drawers;
    this.items = [];
    this.next = null;
    this.loadSoon = debounce(() => this.load(), 150);
    this.el = {
      list: document.getElementById("chats-list"),
      status: document.getElementById("chats-status"),
      more: document.getElementById("chats-more"),
      bar: document.getElementById("archived-bar"),
      title: document.getElementById("archived-title"),
      renameButton: document.getElementById("archived-rename"),
      renameForm: document.getElementById("rename-form"),
      renameInput: document.getElementById("rename-input"),
      renameCancel: document.getElementById("rename-cancel"),
      purge: document.getElementById("archived-purge"),
      back: document.getElementById("archived-back"),
    };
  }

  get base() {
    return `${this.page.apiBase}/chats`;
  }

  start() {
    this.el.more.addEventListener("click", () => this.load({ append: true }));
    this.el.back.addEventListener("click", () => this.showCurrent());
    this.el.purge.addEventListener("click", () => this.purge());
    this.el.renameButton.addEventListener("click", () => this.startRename());
    this.el.renameCancel.addEventListener("click", () => this.endRename());
    this.el.renameForm.addEventListener("submit", (event) => {
      event.preventDefault();
      this.rename();
    });
    this.el.renameInput.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.stopPropagation();
        this.endRename();
      }
    });
    window.addEventListener("popstate", () => this.followAddress());
    this.load();
    this.followAddress();
  }

  followAddress() {
    const id = new URLSearchParams(location.search).get("chat");
    if (id) this.open(id, { push: false });
    else if (this.page.archived) this.showCurrent({ push: false });
  }

  async load({ append = false } = {}) {
    const params = new URLSearchParams({ limit: String(PAGE) });
    if (append && this.next) params.set("cursor", this.next);
    try {
      const page = await api("GET", `${this.base}?${params}`);
      this.items = append ? [...this.items, ...page.results] : page.results;
      this.next = page.next_cursor;
      this.el.status.textContent = this.items.length ? "" : "No chats yet. Your first message starts one.";
      this.render();
    } catch (error) {
      this.el.status.textContent = error.message;
    }
  }

  render() {
    const shown = this.page.archived ? this.page.archived.chat.id : null;
    const focusKey = document.activeElement?.dataset?.chatId;
    this.el.list.replaceChildren(
      ...this.items.map((chat) => {
        const isShown = chat.id === shown || (shown === null && chat.current);
        const meta = h(
          "span",
          { class: "chat-meta" },
          chat.current ? h("span", { class: "chat-badge", text: "Current" }) : null,
          timeNode(chat.archived_at || chat.updated_at),
          ` · ${chat.message_count} message${chat.message_count === 1 ? "" : "s"}`,
        );
        const link = h(
          "a",
          {
            class: "chat-link",
            href: chat.current ? location.pathname : `${location.pathname}?chat=${chat.id}`,
            "data-chat-id": String(chat.id),
            "aria-current": isShown ? "page" : null,
            onclick: (event) => {
              event.preventDefault();
              if (chat.current) this.showCurrent();
              else this.open(chat.id);
            },
          },
          h("span", { class: "chat-name", text: chat.title }),
          meta,
        );
        return h("li", { class: `chat-item${chat.current ? " is-current" : ""}` }, link);
      }),
    );
    this.el.more.hidden = !this.next;
    if (focusKey) this.el.list.querySelector(`[data-chat-id="${CSS.escape(focusKey)}"]`)?.focus();
  }

  async open(id, { push = true } = {}) {
    try {
      const transcript = await api("GET", `${this.base}/${encodeURIComponent(id)}`);
      if (transcript.chat.current) {
        this.showCurrent({ push });
        return;
      }
      if (push) history.pushState({ chat: id }, "", `${location.pathname}?chat=${encodeURIComponent(id)}`);
      this.endRename();
      this.page.showArchived(transcript);
      this.showBar(transcript.chat);
      this.render();
      this.drawers.close({ restoreFocus: false });
      this.el.back.focus();
    } catch (error) {
      this.page.announce(error.message, true);
      if (error.status === 404) {
        if (!push) history.replaceState({}, "", location.pathname);
        this.load();
      }
    }
  }

  showBar(chat) {
    this.el.bar.hidden = false;
    this.el.title.textContent = chat.title;
  }

  showCurrent({ push = true } = {}) {
    if (push && location.search) history.pushState({}, "", location.pathname);
    this.el.bar.hidden = true;
    this.endRename();
    this.page.showCurrent();
    this.render();
    this.drawers.close({ restoreFocus: false });
  }

  startRename() {
    const chat = this.page.archived?.chat;
    if (!chat) return;
    this.el.title.hidden = true;
    this.el.renameForm.hidden = false;
    this.el.renameButton.hidden = true;
    this.el.renameInput.value = chat.titled ? chat.title : "";
    this.el.renameInput.placeholder = chat.title;
    this.el.renameInput.focus();
  }

  endRename() {
    const wasOpen = !this.el.renameForm.hidden;
    this.el.renameForm.hidden = true;
    this.el.title.hidden = false;
    this.el.renameButton.hidden = false;
    if (wasOpen) this.el.renameButton.focus();
  }

  async rename() {
    const chat = this.page.archived?.chat;
    if (!chat) return;
    try {
      const renamed = await api("PATCH", `${this.base}/${chat.id}`, { title: this.el.renameInput.value });
      this.page.archived.chat = renamed;
      this.showBar(renamed);
      this.endRename();
      this.page.announce(`Renamed to “${renamed.title}”.`);
      await this.load();
    } catch (error) {
      this.page.announce(error.message, true);
    }
  }

  async purge() {
    const chat = this.page.archived?.chat;
    if (!chat) return;
    const ok = await confirmAction({
      title: "Delete this chat for good?",
      text: `“${chat.title}” and all its messages, versions and ratings are deleted. This cannot be undone. The agent's Memory is not affected.`,
      ok: "Delete for good",
    });
    if (!ok) return;
    try {
      await api("POST", `${this.base}/${chat.id}/purge`, { confirm: true });
      this.showCurrent();
      this.page.announce("The chat was deleted.");
      await this.load();
      this.page.el.input.focus();
    } catch (error) {
      this.page.announce(error.message, true);
    }
  }
}
