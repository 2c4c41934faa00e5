/* tunefleet page: the token, JSON API calls, server-sent events, small DOM helpers.
   Every value from the server reaches the page through textContent or attributes, never as HTML. */
"use strict";

const TF = (() => {
  const KEY = "tunefleet.token";
  const RETRY_503_S = [1, 2, 4];
  const $ = (sel) => document.querySelector(sel);

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  function banner(text) {
    const b = $("#banner");
    b.textContent = text;
    b.hidden = !text;
  }

  function showLogin(reason) {
    $("#main").hidden = true;
    $("#logout").hidden = true;
    $("#who").textContent = "";
    $("#login").hidden = false;
    $("#login-reason").textContent = reason || "";
    $("#token").focus();
  }

  async function errorText(response) {
    try {
      const body = await response.json();
      return body.error || response.statusText;
    } catch (e) {
      return response.statusText || "HTTP " + response.status;
    }
  }

  /* fetch `path` with the token; JSON unless opts.raw. A rejected token shows the login; a GET
     answered 503 (the database busy or unreachable for now) is tried again after 1, 2 and 4 s. */
  async function request(path, opts = {}) {
    const token = sessionStorage.getItem(KEY);
    if (!token) {
      showLogin("Enter a token to see this server's jobs and results.");
      throw new ApiError(401, "no token");
    }
    const headers = Object.assign({}, opts.headers || {}, { Authorization: "Bearer " + token });
    const retries = (opts.method || "GET").toUpperCase() === "GET" ? RETRY_503_S.length : 0;
    let response;
    for (let attempt = 0; ; attempt++) {
      try {
        response = await fetch(path, Object.assign({}, opts, { headers }));
      } catch (e) {
        if (e.name === "AbortError") throw e;
        banner("Server unreachable: " + location.origin + " did not answer. Is `tunefleet serve` running?");
        throw new ApiError(0, "server unreachable");
      }
      if (response.status !== 503 || attempt >= retries) break;
      banner("The server's database is busy; trying again…");
      await new Promise((done) => setTimeout(done, RETRY_503_S[attempt] * 1000));
    }
    if (response.status === 401) {
      const why = await errorText(response);
      sessionStorage.removeItem(KEY);
      showLogin("Token rejected: " + why);
      throw new ApiError(401, why);
    }
    if (!response.ok) throw new ApiError(response.status, await errorText(response));
    banner("");
    return opts.raw ? response : response.json();
  }

  /* Server-sent events of `path` (fetch, so that the bearer header goes with them):
     calls onEvent(name, data) per event until the stream ends or `signal` aborts. */
  async function events(path, onEvent, signal) {
    const response = await request(path, { raw: true, signal, headers: { Accept: "text/event-stream" } });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let name = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).trim());
        }
        if (data.length) onEvent(name, JSON.parse(data.join("\n")));
      }
    }
  }

  /* An element with attributes (class, href, title, data-*, ...) and children (text or nodes). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  const fmt = {
    ms: (v) => (v === null || v === undefined ? "–" : Number(v).toPrecision(4)),
    num: (v, digits = 3) => (v === null || v === undefined ? "–" : Number(v).toPrecision(digits)),
    /* A speedup the server computed (the one computation the CLI prints too), as `2.66x`. */
    speedup: (v) => (v === null || v === undefined ? "–" : `${Number(v).toFixed(2)}x`),
    when: (iso) => (iso ? new Date(iso).toLocaleString() : "–"),
    /* `K=v,...` with the names in `order` first (a kernel's problem schema), then the rest. */
    problem: (p, order = []) => {
      const names = [...order.filter((n) => n in (p || {})), ...Object.keys(p || {}).filter((n) => !order.includes(n))];
      return names.map((n) => `${n}=${p[n]}`).join(",");
    },
    config: (c) => Object.entries(c || {}).map(([k, v]) => k + "=" + v).join(" "),
  };

  function progress(done, budget) {
    const bar = el("progress", { max: Math.max(budget, 1), value: Math.min(done, budget) });
    return el("span", { class: "progress" }, bar, el("span", { class: "muted", text: ` ${done}/${budget}` }));
  }

  /* Page links for `total` rows from `offset`, `limit` a page; go(newOffset) on click. */
  function pager(container, total, limit, offset, go) {
    container.replaceChildren();
    if (total <= limit) return;
    const pages = Math.ceil(total / limit);
    const current = Math.floor(offset / limit);
    const button = (label, page) => {
      const b = el("button", { type: "button", text: label, disabled: page === current || page < 0 || page >= pages });
      b.addEventListener("click", () => go(page * limit));
      return b;
    };
    container.append(
      button("« first", 0), button("‹ prev", current - 1),
      el("span", { class: "muted", text: ` page ${current + 1} of ${pages} (${total} rows) ` }),
      button("next ›", current + 1), button("last »", pages - 1));
  }

  /* Download `path` (a bundle) with the token, saved under the server's file name. */
  async function download(path) {
    const response = await request(path, { raw: true });
    const disposition = response.headers.get("Content-Disposition") || "";
    const match = /filename="([^"]+)"/.exec(disposition);
    const name = match ? match[1] : "bundle";
    const url = URL.createObjectURL(await response.blob());
    const a = el("a", { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    return name;
  }

  /* Run `start(me)` once a token is accepted (me: GET /v1/whoami). */
  function boot(start) {
    const begin = async () => {
      let me;
      try {
        me = await request("/v1/whoami");
      } catch (e) {
        return;
      }
      $("#login").hidden = true;
      $("#main").hidden = false;
      $("#logout").hidden = false;
      $("#who").textContent = `team ${me.team} · ${me.scope} token`;
      try {
        await start(me);
      } catch (e) {
        if (e.status !== 401) banner(e.status ? `Error ${e.status}: ${e.message}` : e.message);
      }
    };
    $("#login-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const value = $("#token").value.trim();
      $("#token").value = "";
      if (!value) return;
      sessionStorage.setItem(KEY, value);
      location.reload();
    });
    $("#logout").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      location.reload();
    });
    begin();
  }

  return { $, el, fmt, request, events, progress, pager, download, boot, banner, ApiError };
})();
