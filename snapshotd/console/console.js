// The snapshotd console: plain DOM, no build step. Every API call sends the token kept in
// sessionStorage as a Bearer token; data is only ever written with textContent.
"use strict";

(() => {
  const here = location.pathname;
  const BASE = here.slice(0, here.indexOf("/_snapshotd")) + "/_snapshotd";
  const KEY = "snapshotd.token";
  const REFRESH_MS = 2000;
  const PAGE = 50;
  const $ = (id) => document.getElementById(id);

  const ui = {
    sites: [],
    site: null,
    view: "pending",
    prefix: "",
    cursor: null, // null: the first page, which refreshes itself
    nextCursor: null,
    detail: null,
    timer: null,
  };

  class SignedOut extends Error {}

  const ref = (path) => encodeURIComponent(path.slice(1)).replace(/%2F/g, "/");
  const sitePath = (name) => `/api/v1/sites/${encodeURIComponent(ui.site)}/${name}`;

  async function errorText(res) {
    try {
      const data = await res.json();
      return data.error || res.statusText;
    } catch {
      return `${res.status} ${res.statusText}`;
    }
  }

  async function api(method, path, { json, body, contentType, raw } = {}) {
    const headers = {};
    const token = sessionStorage.getItem(KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(json);
    } else if (contentType) {
      headers["Content-Type"] = contentType;
    }
    const res = await fetch(BASE + path, { method, headers, body, cache: "no-store" });
    if (res.status === 401) {
      // A request without a token needs no error; a refused token does, and is forgotten.
      if (sessionStorage.getItem(KEY) === token) sessionStorage.removeItem(KEY);
      showSignIn(token ? await errorText(res) : "");
      throw new SignedOut();
    }
    if (raw) return res;
    if (!res.ok) throw new Error(await errorText(res));
    return res.json();
  }

  function say(text, isError = false) {
    const el = $("message");
    el.textContent = text;
    el.className = isError ? "error" : "";
  }

  function reportError(err) {
    if (!(err instanceof SignedOut)) say(err.message || String(err), true);
  }

  function cell(row, text, className) {
    const td = row.insertCell();
    td.textContent = text === null || text === undefined ? "" : String(text);
    if (className) td.className = className;
    return td;
  }

  function button(text, onClick, className) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = text;
    if (className) b.className = className;
    b.addEventListener("click", onClick);
    return b;
  }

  const shortTime = (iso) => (iso ? iso.replace("T", " ").replace("Z", "") : "");

  // ------------------------------------------------------------------ sign in / out

  function showSignIn(message) {
    clearInterval(ui.timer);
    ui.timer = null;
    $("app").hidden = true;
    $("signout").hidden = true;
    $("site-picker").hidden = true;
    $("signin").hidden = false;
    $("signin-error").textContent = message || "";
    $("token").focus();
  }

  async function showApp() {
    $("signin").hidden = true;
    $("app").hidden = false;
    $("signout").hidden = !sessionStorage.getItem(KEY);
    await refreshStatus();
    await loadList();
    clearInterval(ui.timer);
    ui.timer = setInterval(tick, REFRESH_MS);
  }

  async function tick() {
    try {
      await refreshStatus();
      if (ui.cursor === null) await loadList();
      if (ui.detail) await loadDetail(ui.detail, { quiet: true });
    } catch (err) {
      reportError(err);
    }
  }

  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, $("token").value.trim());
    $("token").value = "";
    try {
      await showApp();
    } catch (err) {
      if (!(err instanceof SignedOut)) showSignIn(err.message);
    }
  });

  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    showSignIn("Signed out.");
  });

  // ------------------------------------------------------------------ status

  async function refreshStatus() {
    const data = await api("GET", "/api/v1/sites");
    ui.sites = data.sites;
    if (!ui.site || !ui.sites.some((s) => s.name === ui.site)) {
      ui.site = ui.sites.length ? ui.sites[0].name : null;
    }
    const picker = $("site");
    if (picker.options.length !== ui.sites.length) {
      picker.replaceChildren(
        ...ui.sites.map((s) => {
          const o = document.createElement("option");
          o.value = o.textContent = s.name;
          return o;
        }),
      );
    }
    picker.value = ui.site || "";
    $("site-picker").hidden = ui.sites.length < 2;

    const body = $("counts").tBodies[0];
    body.replaceChildren();
    for (const s of ui.sites) {
      const row = body.insertRow();
      row.dataset.site = s.name;
      cell(row, s.name);
      cell(row, s.origin);
      for (const state of ["pending", "processing", "processed", "error", "ignored"]) {
        cell(row, s.counts[state], `num count-${state}`);
      }
      cell(row, s.total, "num");
    }
    const outcomes = Object.entries(data.captures || {})
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
    const depth = Object.entries(data.queue_depth || {})
      .map(([k, v]) => `p${k}: ${v}`)
      .join(", ");
    const rate = data.capture_rate === null ? "…" : `${data.capture_rate} per minute`;
    $("rate").textContent =
      `Capture rate: ${rate} (this process). Captures: ${outcomes || "none yet"}. ` +
      `Queue: ${depth}.`;
  }

  $("site").addEventListener("change", () => {
    ui.site = $("site").value;
    ui.cursor = null;
    closeDetail();
    loadList().catch(reportError);
  });

  // ------------------------------------------------------------------ lists

  function selectTab() {
    for (const b of $("tabs").querySelectorAll("button")) {
      b.classList.toggle("active", b.dataset.state === ui.view);
      b.setAttribute("aria-pressed", String(b.dataset.state === ui.view));
    }
  }

  // Lists are reloaded by the timer and by the user; only the newest request may draw.
  let listRequest = 0;

  async function loadList() {
    selectTab();
    if (!ui.site) return;
    const request = ++listRequest;
    const params = new URLSearchParams({ limit: String(PAGE) });
    if (ui.view) params.set("state", ui.view);
    if (ui.prefix) params.set("prefix", ui.prefix);
    if (ui.cursor) params.set("cursor", ui.cursor);
    const data = await api("GET", `${sitePath("paths")}?${params}`);
    if (request !== listRequest) return;
    ui.nextCursor = data.next_cursor;
    const body = $("paths").tBodies[0];
    body.replaceChildren();
    for (const r of data.paths) {
      const row = body.insertRow();
      row.dataset.path = r.path;
      row.dataset.state = r.state;
      const pathCell = cell(row, "", "path");
      pathCell.append(button(r.path, () => loadDetail(r.path).catch(reportError), "link"));
      cell(row, r.state, `state state-${r.state}`);
      cell(row, r.priority, "num");
      cell(row, r.status, "num");
      cell(row, shortTime(r.captured_at));
      cell(row, shortTime(r.expires_at));
      cell(row, r.duplicate_of ? `duplicate of ${r.duplicate_of}` : r.error, "error-text");
      const actions = cell(row, "", "actions");
      actions.append(
        button("Recapture", () => recapture(r.path)),
        button("Delete", () => remove(r.path), "danger"),
      );
    }
    $("empty").hidden = data.paths.length > 0;
    $("next").disabled = !ui.nextCursor;
    $("first").disabled = ui.cursor === null;
  }

  $("tabs").addEventListener("click", (event) => {
    const b = event.target.closest("button");
    if (!b) return;
    ui.view = b.dataset.state;
    ui.cursor = null;
    loadList().catch(reportError);
  });

  $("filter-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const prefix = $("prefix").value.trim();
    if (prefix && !prefix.startsWith("/")) {
      say("A prefix starts with '/'.", true);
      return;
    }
    ui.prefix = prefix;
    ui.cursor = null;
    loadList().catch(reportError);
  });

  $("refresh").addEventListener("click", () => tick());
  $("first").addEventListener("click", () => {
    ui.cursor = null;
    loadList().catch(reportError);
  });
  $("next").addEventListener("click", () => {
    if (!ui.nextCursor) return;
    ui.cursor = ui.nextCursor;
    loadList().catch(reportError);
  });

  // ------------------------------------------------------------------ actions

  function summary(counts) {
    return Object.entries(counts)
      .map(([k, v]) => `${v} ${k}`)
      .join(", ");
  }

  async function queue(paths, priority, force) {
    const data = await api("POST", sitePath("paths"), { json: { paths, priority, force } });
    say(`Queued: ${summary(data.counts)}.`);
    await tick();
    return data;
  }

  $("queue-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const paths = $("queue-paths")
      .value.split("\n")
      .map((p) => p.trim())
      .filter(Boolean);
    if (!paths.length) return;
    try {
      await queue(paths, Number($("queue-priority").value), $("queue-force").checked);
      $("queue-paths").value = "";
    } catch (err) {
      reportError(err);
    }
  });

  $("sitemap-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const file = $("sitemap-file").files[0];
    if (!file) return;
    const params = new URLSearchParams({
      priority: $("queue-priority").value,
      force: String($("queue-force").checked),
    });
    try {
      const data = await api("POST", `${sitePath("sitemap")}?${params}`, {
        body: await file.arrayBuffer(),
        contentType: "application/xml",
      });
      const skipped = data.skipped_count ? `, ${data.skipped_count} skipped` : "";
      say(`Sitemap: ${data.found} URLs; ${summary(data.counts) || "nothing queued"}${skipped}.`);
      $("sitemap-file").value = "";
      await tick();
    } catch (err) {
      reportError(err);
    }
  });

  async function recapture(path) {
    try {
      await queue([path], Number($("queue-priority").value), true);
    } catch (err) {
      reportError(err);
    }
  }

  async function remove(path) {
    if (!confirm(`Delete ${path} and its snapshot?`)) return;
    try {
      await api("DELETE", sitePath(`paths/${ref(path)}`));
      say(`Deleted ${path}.`);
      if (ui.detail === path) closeDetail();
      await tick();
    } catch (err) {
      reportError(err);
    }
  }

  // ------------------------------------------------------------------ one path

  const FIELDS = [
    ["state", "State"],
    ["priority", "Priority"],
    ["status", "Status"],
    ["hops", "Hops"],
    ["attempts", "Attempts"],
    ["created_at", "Found"],
    ["queued_at", "Queued"],
    ["captured_at", "Captured"],
    ["expires_at", "Expires"],
    ["duplicate_of", "Duplicate of"],
    ["error", "Error"],
  ];

  async function loadDetail(path, { quiet = false } = {}) {
    const res = await api("GET", sitePath(`paths/${ref(path)}`), { raw: true });
    if (res.status === 404) {
      if (!quiet) say(`${path} is not known (any more).`, true);
      closeDetail();
      return;
    }
    if (!res.ok) throw new Error(await errorText(res));
    const record = await res.json();
    const changed = ui.detail !== path || $("detail").dataset.capturedAt !== (record.captured_at || "");
    const opening = ui.detail !== path;
    ui.detail = path;
    $("detail").hidden = false;
    if (opening && !quiet) $("detail").scrollIntoView({ block: "nearest" });
    $("detail-path").textContent = path;
    const dl = $("detail-fields");
    dl.replaceChildren();
    for (const [key, label] of FIELDS) {
      if (record[key] === null || record[key] === undefined) continue;
      const dt = document.createElement("dt");
      dt.textContent = label;
      const dd = document.createElement("dd");
      dd.textContent = String(record[key]);
      dd.dataset.field = key;
      dl.append(dt, dd);
    }
    if (!changed) return;
    $("detail").dataset.capturedAt = record.captured_at || "";
    const snap = await api("GET", sitePath(`snapshot/${ref(path)}`), { raw: true });
    const frame = $("snapshot-frame");
    if (snap.ok) {
      // sandbox="" (no scripts, no same-origin) and srcdoc: the snapshot never runs.
      frame.srcdoc = await snap.text();
      frame.hidden = false;
      $("detail-nosnapshot").hidden = true;
    } else {
      frame.srcdoc = "";
      frame.hidden = true;
      $("detail-nosnapshot").hidden = false;
    }
  }

  function closeDetail() {
    ui.detail = null;
    $("detail").hidden = true;
    $("detail").dataset.capturedAt = "";
    $("snapshot-frame").srcdoc = "";
  }

  $("detail-close").addEventListener("click", closeDetail);
  $("detail-recapture").addEventListener("click", () => ui.detail && recapture(ui.detail));
  $("detail-delete").addEventListener("click", () => ui.detail && remove(ui.detail));

  // ------------------------------------------------------------------ start

  // A token in the fragment (the console URL snapshotd logs when no token is configured) is
  // kept as a typed one is, then taken out of the address bar and the history. Browsers
  // never send a fragment, so it reaches no server log.
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given && given.trim()) {
    sessionStorage.setItem(KEY, given.trim());
    history.replaceState(null, "", location.pathname + location.search);
  }
  if (sessionStorage.getItem(KEY)) {
    showApp().catch((err) => {
      if (!(err instanceof SignedOut)) showSignIn(err.message);
    });
  } else {
    showSignIn("");
  }
})();
