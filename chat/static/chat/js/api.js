// The DRF API from the browser: JSON in and out, CSRF on writes, errors as ApiError.

import { cookie } from "./dom.js";

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `Request failed (${status}).`);
    this.status = status;
    this.code = (body && body.code) || "http_error";
    this.extra = (body && body.extra) || {};
  }
}

export async function api(method, url, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRFToken"] = cookie("csrftoken");
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}
