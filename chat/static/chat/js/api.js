// The DRF API from the browser: JSON in and out, CSRF on writes, errors as ApiError with a message a
// person can act on (never the browser's bare "Failed to fetch").

import { cookie } from "./dom.js";

const FALLBACK = {
  0: "Could not reach the server. Check your connection and try again.",
  401: "You are signed out. Reload the page and sign in again.",
  403: "This action was refused. Your session may have expired: reload the page and try again.",
  404: "That is not here any more. Reload the page to see the latest.",
  413: "That is too large to send.",
  429: "Too many requests just now. Wait a moment and try again.",
};

export function readableMessage(status, body) {
  if (body && typeof body.message === "string" && body.message) return body.message;
  if (FALLBACK[status]) return FALLBACK[status];
  if (status >= 500) return `The server had a problem (${status}). Try again in a moment.`;
  return `The request failed (${status}).`;
}

export class ApiError extends Error {
  constructor(status, body) {
    super(readableMessage(status, body));
    this.status = status;
    this.code = (body && body.code) || (status === 0 ? "network_error" : "http_error");
    this.extra = (body && body.extra) || {};
  }
}

export async function api(method, url, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRFToken"] = cookie("csrftoken");
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, null);
  }
  let text = "";
  try {
    text = await response.text();
  } catch {
    throw new ApiError(0, null);
  }
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}
