// The safe text renderer: everything it produces is built from elements and text nodes.

import { h } from "./dom.js";

// Everything it produces is built from elements and text nodes.

const FENCE = /^\s*```\s*([\w+.#-]*)\s*$/;
const FENCE_END = /^\s*```\s*$/;
const BULLET = /^\s*[-*•]\s+(.*)$/;
const NUMBERED = /^\s*\d{1,4}[.)]\s+(.*)$/;

function inline(text) {
  const out = [];
  for (const part of text.split(/(`[^`\n]+`)/)) {
    if (!part) continue;
    if (part.length > 2 && part.startsWith("`") && part.endsWith("`")) out.push(h("code", { text: part.slice(1, -1) }));
    else out.push(document.createTextNode(part));
  }
  return out;
}

export function renderText(text) {
  const fragment = document.createDocumentFragment();
  const lines = String(text ?? "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !FENCE_END.test(lines[i])) body.push(lines[i++]);
      i += 1;
      const code = h("code", { text: body.join("\n") });
      if (fence[1]) code.dataset.lang = fence[1];
      fragment.append(h("pre", { class: "code-block" }, code));
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    if (BULLET.test(line) || NUMBERED.test(line)) {
      const ordered = !BULLET.test(line);
      const pattern = ordered ? NUMBERED : BULLET;
      const list = h(ordered ? "ol" : "ul");
      while (i < lines.length && pattern.test(lines[i])) {
        list.append(h("li", {}, inline(lines[i].match(pattern)[1])));
        i += 1;
      }
      fragment.append(list);
      continue;
    }
    const paragraph = h("p");
    let first = true;
    while (i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !BULLET.test(lines[i]) && !NUMBERED.test(lines[i])) {
      if (!first) paragraph.append(h("br"));
      paragraph.append(...inline(lines[i]));
      first = false;
      i += 1;
    }
    fragment.append(paragraph);
  }
  return fragment;
}
