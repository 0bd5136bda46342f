// The snapshotd console: plain DOM, no build step. Every API call sends the token kept in
// sessionStorage as a Bearer token; data is only ever written with textContent.
"use strict";

(() => {
  const here = location.pathname;
  const BASE = here.slice(0, here.indexOf("/_snapshotd")) + "/_snapshotd";
  const KEY = "snapshotd.token";
  const REFRESH_MS = 2000;
  const PAGE = 50;
  // The states of a path (SPEC section 5), in the order the counts are shown.
  const STATES = ["pending", "processing", "processed", "crawled", "error", "ignored"];
  const $ = (id) => document.getElementById(id);

  const ui = {
    sites: [],
    site: null,
    view: "",
    notFound: null, // how many paths the Not found view lists, from the site's answer
    prefix: "",
    cursor: null, // null: the first page, which refreshes itself
    nextCursor: null,
    page: 1,
    cursors: [], // the cursors of the pages before this one
    chartMinutes: 60,
    capturesPerMinute: null,
    allCaptures: null, // every process's and site's captures: {totals, perMinute}
    queueDepth: "",
    detail: null,
    timer: null,
    actions: 0, // site actions started: a refresh begun before one may find its site gone
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
    // Narrow screens show each row as a card, each value after its column's name.
    const head = row.closest("table").tHead;
    if (head) td.dataset.label = head.rows[0].cells[td.cellIndex].textContent;
    return td;
  }

  function badge(td, text, kind) {
    const b = document.createElement("span");
    b.className = `badge ${kind}`;
    b.textContent = text;
    td.append(b);
    return b;
  }

  // One badge per kind of outcome: 2xx, 3xx, 4xx, or error (a failed capture).
  function statusBadge(td, r) {
    if (r.state === "error") return badge(td, r.status ? `${r.status} error` : "error", "serror");
    if (!r.status) return badge(td, "—", "snone");
    const kind = r.status >= 400 ? "s4xx" : r.status >= 300 ? "s3xx" : "s2xx";
    return badge(td, String(r.status), kind);
  }

  const number = (n) => Number(n).toLocaleString("en");

  function duration(seconds) {
    if (seconds < 90) return `${Math.round(seconds)} s`;
    if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
    if (seconds < 172800) return `${(seconds / 3600).toFixed(1)} h`;
    return `${(seconds / 86400).toFixed(1)} days`;
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
    await refreshCharts();
    clearInterval(ui.timer);
    ui.timer = setInterval(tick, REFRESH_MS);
  }

  async function tick() {
    const actions = ui.actions;
    try {
      await refreshStatus();
      await refreshCharts();
      if (ui.cursor === null) await loadList();
      if (ui.detail) await loadDetail(ui.detail, { quiet: true });
    } catch (err) {
      // The action's own refresh, which follows it, reports what still fails.
      if (ui.actions === actions) reportError(err);
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
      for (const state of STATES) {
        cell(row, s.counts[state], `num count-${state}`);
      }
      cell(row, s.total, "num");
    }
    drawStatus();
    await drawSite();
    ui.queueDepth = Object.entries(data.queue_depth || {})
      .map(([k, v]) => `p${k}: ${v}`)
      .join(", ");
    drawRate();
  }

  // Captures of every process and every site, from the per-minute counters the charts read
  // (never one process's own counts: with several workers, those are a part).
  function drawRate() {
    const all = ui.allCaptures;
    const outcomes = all ? Object.entries(all.totals).map(([k, v]) => `${k} ${number(v)}`) : [];
    const rate = !all ? "…" : all.perMinute === null ? "none in the last 5 minutes"
      : `${all.perMinute.toFixed(1)} a minute over the last 5 minutes`;
    $("rate").textContent =
      `Captures in the last ${duration(ui.chartMinutes * 60)}, all processes: ` +
      `${outcomes.join(", ") || "none"}. Capture rate: ${rate}. ` +
      `Queue: ${ui.queueDepth || "empty"}.`;
  }


  // Cards per state, and a progress bar with an ETA while paths are pending.
  function drawStatus() {
    const site = ui.sites.find((s) => s.name === ui.site);
    if (!site) return;
    const cards = STATES.map((state) => {
      const div = document.createElement("div");
      div.className = `card ${state}`;
      div.dataset.state = state;
      const b = document.createElement("b");
      b.textContent = number(site.counts[state]);
      const label = document.createElement("span");
      label.textContent = state;
      div.append(b, label);
      return div;
    });
    $("cards").replaceChildren(...cards);
    const left = site.counts.pending + site.counts.processing;
    $("progress").hidden = left === 0;
    if (left === 0) return;
    const done = site.total - left;
    const pct = site.total ? (100 * done) / site.total : 0;
    $("progress-fill").style.width = `${pct.toFixed(1)}%`;
    $("progress").querySelector(".bar").setAttribute("aria-valuenow", pct.toFixed(0));
    const rate = ui.capturesPerMinute;
    const eta = rate ? `, about ${duration((left / rate) * 60)} to go at ${rate.toFixed(1)} a minute` : "";
    $("progress-text").textContent =
      `${number(done)} of ${number(site.total)} paths done (${pct.toFixed(0)}%), ` +
      `${number(left)} left${eta}.`;
  }

  // ------------------------------------------------------------------ the site itself

  const siteUrl = (name) => `/api/v1/sites/${encodeURIComponent(name)}`;

  async function drawSite() {
    const none = !ui.site;
    for (const id of ["site-pause", "site-resume", "site-round", "site-restart", "site-delete",
                      "site-settings", "site-params", "job"]) {
      $(id).hidden = none;
    }
    $("new-site").open = none || $("new-site").open;
    $("site-name").textContent = none ? "(none yet: create one)" : ui.site;
    if (none) {
      $("site-state").textContent = "";
      return;
    }
    const site = await api("GET", siteUrl(ui.site));
    $("site-state").textContent = site.paused ? "paused" : "crawling";
    $("site-state").className = `badge ${site.paused ? "paused" : "ok"}`;
    $("site-pause").hidden = site.paused;
    $("site-resume").hidden = !site.paused;
    drawJob(site);
    if ($("site-params").open) await drawParams();
    const editor = $("settings-json");
    if (document.activeElement !== editor && editor.dataset.site !== ui.site) {
      editor.value = JSON.stringify(site.settings, null, 2);
      editor.dataset.site = ui.site;
    }
  }

  // The site's crawl job (SPEC 7.2): its status, this round's progress, its counters.
  function drawJob(site) {
    const job = site.job;
    const code = job.jobStatus.status;
    $("job-code").textContent = code;
    $("job-code").className = `badge ${code === 7 || code === 0 ? "s3xx"
      : code === 9 || code === 4 ? "s2xx" : code === 6 ? "snone" : "s4xx"}`;
    const counts = site.counts;
    const left = counts.pending + counts.processing;
    // In progress with no page left to capture: what is left is following the links of the
    // last pages captured, which the crawler does.
    $("job-message").textContent = code === 7 && left === 0
      ? `${job.jobStatus.message}: every page found is captured; the crawler is still to ` +
        "follow the links of the last ones"
      : job.jobStatus.message;
    // Why this round's end could not be told (a refused webhook, a mail given up).
    $("job-notify-error").textContent = job.notificationError
      ? `Not notified: ${job.notificationError}` : "";
    $("job-notify-error").hidden = !job.notificationError;
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    $("job-round").textContent = `${job.roundsCompleted + 1}, started ${
      new Date(job.roundStartTime * 1000).toLocaleString()}`;
    $("job-progress").value = total ? (total - left) / total : 0;
    $("job-done").textContent = `${total - left} of ${total} pages`;
    const rows = [
      ["Pages processed (snapshots kept)", job.objectsFound],
      ["URLs found", job.urlsHarvested],
      ["Renders this round", job.pageCrawlSuccessesThisRound],
      ["Processed this round", job.pageProcessSuccessesThisRound],
      ["Renders tried / done", `${job.pageCrawlAttempts} / ${job.pageCrawlSuccesses}`],
      ["Rounds completed", job.roundsCompleted],
    ];
    // What search engines are told (SPEC 5.4, 5.5).
    if (site.settings.sitemap_path) rows.push(["Public sitemap", site.settings.sitemap_path]);
    const told = site.indexnow;
    if (site.settings.indexnow_key) {
      rows.push(["IndexNow URLs sent / failed / waiting",
                 `${told.sent} / ${told.failed} / ${told.waiting}`]);
      rows.push(["IndexNow last POST", told.last_post_at
        ? `${new Date(told.last_post_at * 1000).toLocaleString()}: ${
          told.last_error || `answered ${told.last_status}`}` : "none yet"]);
    }
    // The app's not-found view and the pages that show it (SPEC 5.6).
    const missing = site.not_found;
    const view = missing.view;
    ui.notFound = missing.paths;
    rows.push(["Not-found view", view.state === "learned"
      ? `learned ${new Date(view.learned_at).toLocaleString()}: “${view.text}”`
      : view.why ? `${view.state}: ${view.why}` : view.state]);
    if (view.error) rows.push(["Not-found view, last try", view.error]);
    rows.push(["Soft 404s answered / shown", `${missing.answered} / ${missing.paths}`]);
    $("job-counters").replaceChildren(...rows.flatMap(([name, value]) => {
      const dt = document.createElement("dt");
      const dd = document.createElement("dd");
      dt.textContent = name;
      dd.textContent = value;
      return [dt, dd];
    }));
  }

  // The site's query parameters (SPEC 5.3): learned, kept, or pinned by the operator.
  async function drawParams() {
    const name = ui.site;
    const data = await api("GET", `${siteUrl(name)}/params`);
    const body = $("params").tBodies[0];
    body.replaceChildren();
    for (const p of data.params) {
      const row = body.insertRow();
      cell(row, p.name);
      cell(row, p.pinned ? `${p.state} (pinned)` : p.state,
           `badge ${p.state === "ignored" ? "s2xx" : p.state === "kept" ? "s3xx" : "snone"}`);
      cell(row, p.scope || "");
      cell(row, `same on ${p.same.length}, differs on ${p.differ.length}`);
      const actions = row.insertCell();
      for (const [label, how] of [["Ignore", "ignored"], ["Keep", "kept"], ["Forget", null]]) {
        const button = document.createElement("button");
        button.type = "button";
        button.textContent = label;
        button.addEventListener("click", async () => {
          try {
            const url = `${siteUrl(name)}/params/${encodeURIComponent(p.name)}`;
            await (how ? api("PUT", url, { json: { state: how, scope: p.scope || "/" } })
              : api("DELETE", url));
            say(how ? `Pinned ${p.name} as ${how}.` : `Forgot what was learned of ${p.name}.`);
            await drawParams();
          } catch (err) {
            reportError(err);
          }
        });
        actions.append(button);
      }
    }
  }

  $("site-params").addEventListener("toggle", () => {
    if ($("site-params").open) drawParams().catch(reportError);
  });

  async function siteAction(action, question) {
    const name = ui.site;
    if (!name || (question && !confirm(question))) return;
    ui.actions += 1; // before the request and after it: a refresh begun meanwhile is stale
    try {
      const res = action === "delete"
        ? await api("DELETE", siteUrl(name))
        : await api("POST", `${siteUrl(name)}/${action}`);
      ui.actions += 1;
      say(action === "delete" ? `Deleted site ${name} and its ${res.paths} paths.`
        : action === "restart" ? `Restarted ${name}: removed ${res.paths} paths, crawling again.`
        : action === "round" ? `Started a new round of ${name}: ${res.queued} pages queued again.`
        : `${action === "pause" ? "Paused" : "Resumed"} the crawl of ${name}.`);
      $("settings-json").dataset.site = "";
      await tick();
    } catch (err) {
      reportError(err);
    }
  }

  $("site-pause").addEventListener("click", () => siteAction("pause"));
  $("site-resume").addEventListener("click", () => siteAction("resume"));
  $("site-round").addEventListener("click", () => siteAction("round"));
  $("site-restart").addEventListener("click", () =>
    siteAction("restart", `Remove every path and snapshot of ${ui.site} and crawl it again?`));
  $("site-delete").addEventListener("click", () =>
    siteAction("delete", `Delete the site ${ui.site} with all its paths and snapshots?`));

  async function putSite(name, settings, done) {
    try {
      await api("PUT", siteUrl(name), { json: settings });
      say(done);
      ui.site = name;
      $("settings-json").dataset.site = "";
      await tick();
    } catch (err) {
      reportError(err);
    }
  }

  $("settings-form").addEventListener("submit", (event) => {
    event.preventDefault();
    let settings;
    try {
      settings = JSON.parse($("settings-json").value);
    } catch (err) {
      say(`The settings are not JSON: ${err.message}`, true);
      return;
    }
    putSite(ui.site, settings, `Saved the settings of ${ui.site}.`);
  });

  $("new-site-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const name = $("new-site-name").value.trim();
    putSite(name, { origin: $("new-site-origin").value.trim() }, `Created site ${name}.`);
  });

  $("site").addEventListener("change", () => {
    ui.site = $("site").value;
    ui.cursor = null;
    ui.cursors = [];
    ui.page = 1;
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
    // The Not found view is of the paths that showed the site's not-found view (SPEC 5.6).
    if (ui.view === "not_found") params.set("not_found", "true");
    else if (ui.view) params.set("state", ui.view);
    if (ui.view === "pending") params.set("order", "crawl"); // next to be captured first
    if (ui.prefix) params.set("prefix", ui.prefix);
    if (ui.cursor) params.set("cursor", ui.cursor);
    const data = await api("GET", `${sitePath("paths")}?${params}`);
    if (request !== listRequest) return;
    ui.nextCursor = data.next_cursor;
    $("expires-head").textContent = ui.view === "error" ? "Retry at" : "Expires";
    const body = $("paths").tBodies[0];
    body.replaceChildren();
    for (const r of data.paths) {
      const row = body.insertRow();
      row.dataset.path = r.path;
      row.dataset.state = r.state;
      const pathCell = cell(row, "", "path");
      pathCell.append(button(r.path, () => loadDetail(r.path).catch(reportError), "link"));
      // A stored 4xx page is processed, but not a success: it is not shown as one.
      const failedPage = r.state === "processed" && r.status >= 400;
      cell(row, r.state, `state state-${failedPage ? "processed-4xx" : r.state}`);
      cell(row, r.priority, "num");
      const statusCell = cell(row, "", "num status");
      statusBadge(statusCell, r);
      // Captured when a limit ended the wait while the page was still changing.
      if (r.readiness_limit) {
        badge(statusCell, "limit", "s4xx").title =
          "Captured at a readiness limit: the page was still changing. " +
          "Have it call onCaptureReady, or give it a longer javascript_timeout.";
      }
      cell(row, shortTime(r.captured_at));
      cell(row, shortTime(r.expires_at));
      cell(row, r.duplicate_of ? `duplicate of ${r.duplicate_of}`
        : r.not_found ? `not-found view: ${r.not_found}` : r.error, "error-text");
      const actions = cell(row, "", "actions");
      actions.append(
        button("Recapture", () => recapture(r.path)),
        button("Delete", () => remove(r.path), "danger"),
      );
    }
    $("empty").hidden = data.paths.length > 0;
    $("next").disabled = !ui.nextCursor;
    $("first").disabled = ui.cursor === null;
    drawTotals(data.paths.length);
  }

  // "51–100 of 2,965 · page 2 of 60": the totals come from the counts per state.
  function drawTotals(shown) {
    const site = ui.sites.find((s) => s.name === ui.site);
    const total = !site || ui.prefix ? null : ui.view === "not_found" ? ui.notFound
      : ui.view ? site.counts[ui.view] : site.total;
    const first = (ui.page - 1) * PAGE;
    const range = shown ? `${number(first + 1)}–${number(first + shown)}` : "none";
    if (total === null) {
      $("list-total").textContent = ui.prefix ? `${range} (matching ${ui.prefix})` : range;
      $("page-of").textContent = `page ${ui.page}`;
      return;
    }
    const pages = Math.max(1, Math.ceil(total / PAGE));
    $("list-total").textContent = `${range} of ${number(total)}`;
    $("page-of").textContent = `page ${ui.page} of ${number(pages)}`;
  }

  $("tabs").addEventListener("click", (event) => {
    const b = event.target.closest("button");
    if (!b) return;
    ui.view = b.dataset.state;
    ui.cursor = null;
    ui.cursors = [];
    ui.page = 1;
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
    ui.cursors = [];
    ui.page = 1;
    loadList().catch(reportError);
  });

  $("refresh").addEventListener("click", () => tick());
  $("first").addEventListener("click", () => {
    ui.cursor = null;
    ui.cursors = [];
    ui.page = 1;
    loadList().catch(reportError);
  });
  $("next").addEventListener("click", () => {
    if (!ui.nextCursor) return;
    ui.cursors.push(ui.cursor);
    ui.cursor = ui.nextCursor;
    ui.page += 1;
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

  async function uploadSitemaps(files) {
    const params = new URLSearchParams({
      priority: $("queue-priority").value,
      force: String($("queue-force").checked),
    });
    const said = [];
    try {
      for (const file of files) {
        const data = await api("POST", `${sitePath("sitemap")}?${params}`, {
          body: await file.arrayBuffer(),
          contentType: "application/xml",
        });
        const skipped = data.skipped_count ? `, ${data.skipped_count} skipped` : "";
        said.push(
          `${file.name}: ${data.found} URLs; ${summary(data.counts) || "nothing queued"}${skipped}`,
        );
        say(`Sitemap ${said.join("; ")}.`);
      }
      $("sitemap-file").value = "";
      await tick();
    } catch (err) {
      reportError(err);
    }
  }

  $("sitemap-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const files = [...$("sitemap-file").files];
    if (files.length) uploadSitemaps(files);
  });

  // Sitemap files dropped anywhere on the form are uploaded at once.
  const zone = $("sitemap-form");
  for (const type of ["dragenter", "dragover"]) {
    zone.addEventListener(type, (event) => {
      event.preventDefault();
      zone.classList.add("over");
    });
  }
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    const files = [...(event.dataTransfer ? event.dataTransfer.files : [])];
    if (files.length) uploadSitemaps(files);
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

  // ------------------------------------------------------------------ charts

  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = {
    HIT: "#2e7d32", STALE: "#b26a00", MISS: "#1f6feb", RETRY: "#0a7d8c", BYPASS: "#c62828",
    RULE: "#6f42c1", PASS: "#8c959f", ok: "#2e7d32", duplicate: "#8c959f", error: "#c62828",
    not_found: "#b26a00",
  };
  const PALETTE = ["#1f6feb", "#2e7d32", "#b26a00", "#6f42c1", "#c62828", "#0a7d8c", "#8c959f", "#d4377a"];

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (parent) parent.append(node);
    return node;
  }

  function legend(id, keys, color, totals) {
    $(id).replaceChildren(
      ...keys.map((k) => {
        const span = document.createElement("span");
        const i = document.createElement("i");
        i.style.background = color(k);
        span.append(i, `${k} ${number(totals[k] || 0)}`);
        return span;
      }),
    );
  }

  // Stacked bars, one per slot (a minute, or a bucket), one colour per key.
  function bars(svg, slots, keys, color, labels) {
    const width = svg.clientWidth || 320;
    const height = svg.clientHeight || 150;
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.replaceChildren();
    const left = 30, bottom = 16, top = 6;
    const plotH = height - bottom - top;
    const max = Math.max(1, ...slots.map((slot) => keys.reduce((n, k) => n + (slot[k] || 0), 0)));
    el("line", { x1: left, x2: width, y1: top + plotH, y2: top + plotH, class: "axis" }, svg);
    el("text", { x: 2, y: top + 8 }, svg).textContent = number(max);
    el("text", { x: 2, y: top + plotH }, svg).textContent = "0";
    const step = (width - left) / Math.max(1, slots.length);
    slots.forEach((slot, i) => {
      let y = top + plotH;
      for (const k of keys) {
        const n = slot[k] || 0;
        if (!n) continue;
        const h = Math.max(1, (n / max) * plotH);
        y -= h;
        const rect = el("rect", {
          x: left + i * step + step * 0.1, y, width: Math.max(1, step * 0.8), height: h,
          fill: color(k), class: "bar",
        }, svg);
        el("title", {}, rect).textContent = `${labels[i]}: ${k} ${n}`;
      }
    });
    const marks = [0, Math.floor(slots.length / 2), slots.length - 1];
    for (const i of new Set(marks)) {
      if (i < 0 || !labels[i]) continue;
      const anchor = i === 0 ? "start" : i === slots.length - 1 ? "end" : "middle";
      el("text", { x: left + i * step + step / 2, y: height - 3, "text-anchor": anchor }, svg)
        .textContent = labels[i];
    }
  }

  const clock = (t) => new Date(t * 1000).toISOString().slice(11, 16);

  async function refreshCharts() {
    if (!ui.site) return;
    const data = await api("GET", `/api/v1/stats?minutes=${ui.chartMinutes}`);
    // Minutes are grouped so that each chart has at most 60 bars.
    const span = Math.max(1, Math.ceil(ui.chartMinutes / 60));
    const count = Math.ceil(ui.chartMinutes / span);
    const slots = { results: [], bots: [], captures: [] };
    for (const name of Object.keys(slots)) {
      for (let i = 0; i < count; i++) slots[name].push({});
    }
    const render = {};
    const totals = { results: {}, bots: {}, captures: {}, render: {} };
    // claim:FAMILY/CLAIM counters: requests claiming a crawler, by family and claim.
    const claims = {};
    const recent = { captures: 0, since: data.to - 4 * 60, first: data.to };
    const all = { totals: {}, captures: 0, first: data.to };
    for (const [t, site, name, value] of data.rows) {
      if (name.startsWith("capture:")) {
        const outcome = name.slice("capture:".length);
        all.totals[outcome] = (all.totals[outcome] || 0) + value;
        if (t >= recent.since) {
          all.captures += value;
          all.first = Math.min(all.first, t);
        }
      }
      if (site !== ui.site) continue;
      const [kind, key] = [name.slice(0, name.indexOf(":")), name.slice(name.indexOf(":") + 1)];
      const i = Math.min(count - 1, Math.floor((t - data.from) / 60 / span));
      const group = { result: "results", bot: "bots", capture: "captures" }[kind];
      if (group) {
        slots[group][i][key] = (slots[group][i][key] || 0) + value;
        totals[group][key] = (totals[group][key] || 0) + value;
        if (kind === "capture" && t >= recent.since) {
          recent.captures += value;
          recent.first = Math.min(recent.first, t);
        }
      } else if (kind === "render") {
        render[key] = (render[key] || 0) + value;
        totals.render[key] = render[key];
      } else if (kind === "claim") {
        const [family, claim] = [key.slice(0, key.lastIndexOf("/")), key.slice(key.lastIndexOf("/") + 1)];
        claims[family] = claims[family] || {};
        claims[family][claim] = (claims[family][claim] || 0) + value;
      }
    }
    // Captures a minute over the last five minutes (all processes), counted from the first
    // minute in them that had one: the ETA's rate.
    const minutes = (data.to - recent.first) / 60 + 1;
    ui.capturesPerMinute = recent.captures ? recent.captures / minutes : null;
    ui.allCaptures = {
      totals: all.totals,
      perMinute: all.captures ? all.captures / ((data.to - all.first) / 60 + 1) : null,
    };
    drawRate();
    drawStatus();
    const labels = slots.results.map((_, i) => clock(data.from + i * span * 60));
    const results = ["HIT", "STALE", "MISS", "RETRY", "BYPASS", "RULE", "PASS"];
    bars($("chart-results"), slots.results, results, (k) => COLORS[k], labels);
    legend("legend-results", results.filter((k) => totals.results[k]), (k) => COLORS[k], totals.results);
    const bots = Object.keys(totals.bots).sort((a, b) => totals.bots[b] - totals.bots[a]);
    const botColor = (k) => PALETTE[bots.indexOf(k) % PALETTE.length];
    bars($("chart-bots"), slots.bots, bots, botColor, labels);
    legend("legend-bots", bots, botColor, totals.bots);
    const outcomes = ["ok", "duplicate", "not_found", "error"];
    bars($("chart-captures"), slots.captures, outcomes, (k) => COLORS[k], labels);
    legend("legend-captures", outcomes, (k) => COLORS[k], totals.captures);
    const buckets = data.render_buckets;
    const bucketLabels = buckets.map((b, i) => (b === "inf" ? `>${buckets[i - 1]} s` : `≤${b} s`));
    bars($("chart-render"), buckets.map((b) => ({ n: render[b] || 0 })), ["n"], () => "#0a7d8c", bucketLabels);
    const renders = Object.values(render).reduce((a, b) => a + b, 0);
    $("legend-render").textContent = `${number(renders)} renders`;

    const claimBody = $("claims").tBodies[0];
    claimBody.replaceChildren();
    const sum = (c) => Object.values(c).reduce((a, b) => a + b, 0);
    for (const family of Object.keys(claims).sort((a, b) => sum(claims[b]) - sum(claims[a]))) {
      const row = claimBody.insertRow();
      cell(row, family);
      for (const claim of ["verified", "unverified", "refused", "unverifiable", "pending"]) {
        cell(row, number(claims[family][claim] || 0), "num");
      }
    }
    $("claims-empty").hidden = claimBody.rows.length > 0;

    const body = $("recent").tBodies[0];
    body.replaceChildren();
    for (const r of data.recent.filter((x) => x.site === ui.site).slice(0, 20)) {
      const row = body.insertRow();
      cell(row, new Date(r.time * 1000).toISOString().slice(11, 19));
      cell(row, r.bot);
      cell(row, r.path, "path");
      badge(cell(row, ""), r.result, `r-${r.result}`);
      cell(row, r.status, "num");
      cell(row, r.ms, "num");
    }
    $("recent-empty").hidden = body.rows.length > 0;
  }

  $("chart-window").addEventListener("change", () => {
    ui.chartMinutes = Number($("chart-window").value);
    refreshCharts().catch(reportError);
  });

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
    ["readiness_limit", "Readiness limit"],
    ["profiles", "Own snapshots"],
    ["not_found", "Not-found view"],
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
    $("app").classList.add("with-detail");
    if (opening && !quiet) $("detail").scrollTop = 0;
    $("detail-path").textContent = path;
    const dl = $("detail-fields");
    dl.replaceChildren();
    for (const [key, label] of FIELDS) {
      const value = record[key];
      if (value === null || value === undefined || (Array.isArray(value) && !value.length)) {
        continue;
      }
      const dt = document.createElement("dt");
      dt.textContent = label;
      const dd = document.createElement("dd");
      // The device profiles with a snapshot of their own: the others are served the first.
      dd.textContent = Array.isArray(value) ? value.join(", ") : String(value);
      dd.dataset.field = key;
      dl.append(dt, dd);
    }
    if (!changed) return;
    $("detail").dataset.capturedAt = record.captured_at || "";
    await loadFrame(path);
  }

  // The snapshot a crawler of the chosen device profile is served.
  async function loadFrame(path) {
    const profile = $("detail-profile").value;
    const snap = await api("GET", sitePath(`snapshot/${ref(path)}?profile=${profile}`), {
      raw: true,
    });
    if (ui.detail !== path || $("detail-profile").value !== profile) return;
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
    $("app").classList.remove("with-detail");
    $("detail").dataset.capturedAt = "";
    $("snapshot-frame").srcdoc = "";
  }

  $("detail-close").addEventListener("click", closeDetail);
  $("detail-profile").addEventListener(
    "change", () => ui.detail && loadFrame(ui.detail).catch(reportError),
  );
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
