// Small DOM helpers shared by the owner's pages: element building, icons, cookies, formatting (sizes,
// relative and exact times), the confirmation dialog.
export function h(tag, attrs = {}, ...children) {
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

export function icon(name) {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "icon");
  const path = document.createElementNS(SVG_NS, "path");
  path.setAttribute("d", ICONS[name]);
  svg.append(path);
  return svg;
}

export function cookie(name) {
  for (const part of document.cookie.split(";")) {
    const [key, ...rest] = part.trim().split("=");
    if (key === name) return decodeURIComponent(rest.join("="));
  }
  return "";
}

export function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

export function formatWhen(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  return date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

const RELATIVE_STEPS = [
  [60, "second", 1],
  [3600, "minute", 60],
  [86400, "hour", 3600],
  [86400 * 7, "day", 86400],
];

// "just now", "5 minutes ago", "yesterday", … and a plain date past a week.
export function formatRelative(iso, now = Date.now()) {
  const date = new Date(iso);
  if (!iso || Number.isNaN(date.getTime())) return "";
  const seconds = Math.round((date.getTime() - now) / 1000);
  const distance = Math.abs(seconds);
  if (distance < 45) return "just now";
  const format = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  for (const [limit, unit, size] of RELATIVE_STEPS) {
    if (distance < limit) return format.format(Math.round(seconds / size), unit);
  }
  return date.toLocaleDateString(undefined, { dateStyle: "medium" });
}

export function formatExact(iso) {
  const date = new Date(iso);
  if (!iso || Number.isNaN(date.getTime())) return "";
  return date.toLocaleString(undefined, { dateStyle: "full", timeStyle: "medium" });
}

// A <time> showing the relative time, the exact one on hover; `refreshTimes` keeps them current.
export function timeNode(iso, className = "when") {
  return h("time", { class: className, datetime: iso, title: formatExact(iso), "data-when": iso, text: formatRelative(iso) });
}

export function refreshTimes(root = document) {
  for (const node of root.querySelectorAll("time[data-when]")) node.textContent = formatRelative(node.dataset.when);
}

export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

// --- confirmation dialog ------------------------------------------------------------------------

export function confirmAction({ title, text, ok }) {
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
