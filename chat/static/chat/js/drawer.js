// Side panels that become drawers on narrow screens: opened by their toggle, closed by the close button,
// the backdrop or Escape; while open, Tab keeps focus inside, and closing returns it to the toggle.

const FOCUSABLE =
  'a[href], button:not([disabled]), input:not([disabled]), textarea:not([disabled]), select:not([disabled]), summary, [tabindex]:not([tabindex="-1"])';

export class Drawers {
  constructor({ backdrop }) {
    this.backdrop = backdrop;
    this.items = new Map(); // id → {panel, toggle, query}
    this.openId = null;
    this.backdrop.addEventListener("click", () => this.close());
    document.addEventListener("keydown", (event) => this.onKey(event));
  }

  // `query`: the widths at which this panel is a drawer (wider, it sits in the layout).
  add(id, { panel, toggle, query }) {
    const media = window.matchMedia(query);
    this.items.set(id, { panel, toggle, media });
    toggle.addEventListener("click", () => (this.openId === id ? this.close() : this.open(id)));
    for (const button of panel.querySelectorAll(`[data-close="${id}"]`)) button.addEventListener("click", () => this.close());
    media.addEventListener("change", () => {
      if (!media.matches && this.openId === id) this.close({ restoreFocus: false });
      this.sync(id);
    });
    this.sync(id);
  }

  sync(id) {
    const { panel, media } = this.items.get(id);
    const modal = media.matches && this.openId === id;
    panel.toggleAttribute("aria-modal", modal);
    if (modal) panel.setAttribute("role", "dialog");
    else panel.removeAttribute("role");
  }

  isDrawer(id) {
    return this.items.get(id)?.media.matches ?? false;
  }

  open(id) {
    if (this.openId) this.close({ restoreFocus: false });
    const item = this.items.get(id);
    if (!item || !item.media.matches) return;
    this.openId = id;
    item.panel.classList.add("is-open");
    item.toggle.setAttribute("aria-expanded", "true");
    this.backdrop.hidden = false;
    this.sync(id);
    (item.panel.querySelector(".drawer-close") || item.panel.querySelector(FOCUSABLE))?.focus();
  }

  close({ restoreFocus = true } = {}) {
    const id = this.openId;
    if (!id) return;
    const item = this.items.get(id);
    this.openId = null;
    item.panel.classList.remove("is-open");
    item.toggle.setAttribute("aria-expanded", "false");
    this.backdrop.hidden = true;
    this.sync(id);
    if (restoreFocus) item.toggle.focus();
  }

  focusables(panel) {
    return [...panel.querySelectorAll(FOCUSABLE)].filter((node) => node.getClientRects().length > 0);
  }

  onKey(event) {
    if (!this.openId || document.querySelector("dialog[open]")) return;
    const { panel } = this.items.get(this.openId);
    if (event.key === "Escape") {
      event.preventDefault();
      this.close();
      return;
    }
    if (event.key !== "Tab") return;
    const nodes = this.focusables(panel);
    if (!nodes.length) return;
    const first = nodes[0];
    const last = nodes[nodes.length - 1];
    const inside = panel.contains(document.activeElement);
    if (!inside || (event.shiftKey && document.activeElement === first)) {
      event.preventDefault();
      (event.shiftKey ? last : first).focus();
    } else if (!event.shiftKey && document.activeElement === last) {
      event.preventDefault();
      first.focus();
    }
  }
}
