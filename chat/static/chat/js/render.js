// Message bodies: Markdown (CommonMark + GFM) rendered safely, also while an answer streams.
//
// marked turns the text into HTML in which every piece of raw HTML from the message is escaped (shown as
// text, never run); code blocks are highlighted by highlight.js; DOMPurify then keeps only the tags and
// attributes below, and the result is parsed into a fragment. Links open in a new tab without an opener;
// images become links (the page's policy loads no outside images). Copy buttons are added as elements.
// The libraries are vendored under /static/vendor/ (see its README).

import { Marked } from "../../vendor/marked/marked.esm.js";
import DOMPurify from "../../vendor/dompurify/purify.es.mjs";
import hljs from "../../vendor/highlight.js/highlight.min.js";
import { h } from "./dom.js";

const ALLOWED_TAGS = [
  "a", "blockquote", "br", "code", "del", "div", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "input",
  "li", "ol", "p", "pre", "s", "span", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
];
const ALLOWED_ATTR = ["align", "checked", "class", "data-lang", "disabled", "href", "start", "title", "type"];
const LANGUAGE = /^[\w+#.-]{1,32}$/;

function escapeHtml(text) {
  return String(text)
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&#39;");
}

function highlighted(code, language) {
  if (language && hljs.getLanguage(language)) {
    try {
      return hljs.highlight(code, { language, ignoreIllegals: true }).value;
    } catch {
      // an unexpected grammar failure shows the code plain
    }
  }
  return escapeHtml(code);
}

const markdown = new Marked({
  gfm: true,
  breaks: true,
  renderer: {
    // Raw HTML in a message is text to show, never markup.
    html({ text }) {
      return escapeHtml(text);
    },
    image({ href, text }) {
      const label = text ? `image: ${text}` : "image";
      return `<a href="${escapeHtml(href)}">${escapeHtml(label)}</a>`;
    },
    code({ text, lang }) {
      const language = (lang || "").trim().split(/\s+/)[0].toLowerCase();
      const known = LANGUAGE.test(language) ? language : "";
      const label = known ? `<span class="code-lang">${escapeHtml(known)}</span>` : '<span class="code-lang">code</span>';
      const codeClass = known ? `hljs language-${escapeHtml(known)}` : "hljs";
      return (
        `<div class="code-block" data-lang="${escapeHtml(known)}"><div class="code-head">${label}</div>` +
        `<pre><code class="${codeClass}">${highlighted(text, known)}</code></pre></div>`
      );
    },
  },
});

const purifier = DOMPurify;
purifier.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  } else if (node.tagName === "INPUT") {
    if (node.getAttribute("type") !== "checkbox") node.remove();
    else node.setAttribute("disabled", "");
  }
});

function sanitized(html) {
  return purifier.sanitize(html, {
    ALLOWED_TAGS,
    ALLOWED_ATTR,
    ALLOW_DATA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  });
}

async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = h("textarea", { class: "visually-hidden", "aria-hidden": "true" });
  area.value = text;
  document.body.append(area);
  area.select();
  const done = document.execCommand("copy");
  area.remove();
  if (!done) throw new Error("copy refused");
}

function addCopyButtons(fragment) {
  for (const block of fragment.querySelectorAll(".code-block")) {
    const code = block.querySelector("code");
    const button = h("button", { type: "button", class: "code-copy", "aria-label": "Copy code", text: "Copy" });
    button.addEventListener("click", async () => {
      try {
        await copyText(code.textContent);
        button.textContent = "Copied";
      } catch {
        button.textContent = "Copy failed";
      }
      clearTimeout(button.resetTimer);
      button.resetTimer = setTimeout(() => {
        button.textContent = "Copy";
      }, 1500);
    });
    block.querySelector(".code-head").append(button);
  }
}

// Rendered Markdown by text, so a message drawn again (a version switch, a refetched thread, a rating)
// is cloned, not parsed and sanitized again. Bounded: the least recently used texts leave first.
const CACHE_ENTRIES = 500;
const rendered = new Map();

// How many texts were parsed (the cache's misses and the drafts); the browser tests read it.
export const renderStats = { parsed: 0 };

function parse(text) {
  renderStats.parsed += 1;
  return sanitized(markdown.parse(text));
}

function parsed(text, cache) {
  if (!cache) return parse(text);
  let fragment = rendered.get(text);
  if (fragment) rendered.delete(text);
  else fragment = parse(text);
  rendered.set(text, fragment);
  if (rendered.size > CACHE_ENTRIES) rendered.delete(rendered.keys().next().value);
  return fragment.cloneNode(true);
}

// Markdown text → a fragment of safe elements. A streaming draft changes with every delta: it passes
// `cache: false` so it does not push finished messages out of the cache.
export function renderText(text, { cache = true } = {}) {
  const fragment = parsed(String(text ?? ""), cache);
  addCopyButtons(fragment);
  return fragment;
}

// What a message's body shows, by its kind. A kind with its own look registers a renderer here.
const BODY_RENDERERS = new Map([
  ["text", (message) => renderText(message.text)],
  ["notice", (message) => h("p", { class: "notice-text", text: message.text })],
]);

export function registerBodyRenderer(kind, render) {
  BODY_RENDERERS.set(kind, render);
}

export function renderBody(message) {
  const render = BODY_RENDERERS.get(message.kind) || BODY_RENDERERS.get("text");
  return render(message);
}
