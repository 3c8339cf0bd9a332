// linemq status page: polls the JSON API once a second and redraws. Plain
// DOM, no framework, no external assets. Every string that came from a
// client (ids, usernames, topic filters) goes in through textContent only.
"use strict";
(() => {
  const POLL_MS = 1000;       // status and groups
  const CLIENTS_MS = 3000;    // the clients table
  const TIMEOUT_MS = 4000;    // one request
  const CLIENTS_PAGE = 50;
  const HISTORY = 300;        // samples the chart spans (the server's HistoryLength)

  const $ = (id) => document.getElementById(id);

  // h builds an element: h("td", {class: "num"}, "12").
  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === null || v === undefined || v === false) continue;
        if (k === "class") e.className = v;
        else if (k === "data") Object.assign(e.dataset, v);
        else if (k === "style") Object.assign(e.style, v); // CSSOM: allowed by the page's CSP, unlike a style attribute
        else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
        else e.setAttribute(k, v === true ? "" : String(v));
      }
    }
    for (const k of kids.flat()) {
      if (k === null || k === undefined || k === false) continue;
      e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }

  // --- formatting ---
  const nf = new Intl.NumberFormat("en-US");
  const fmtInt = (v) => (v === null || v === undefined ? "–" : nf.format(Math.round(v)));
  function fmtRate(v) {
    if (!v) return "0";
    if (v < 10) return v.toFixed(1);
    return nf.format(Math.round(v));
  }
  function fmtDur(s) {
    if (!s || s <= 0) return "–";
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + " s";
    const m = Math.floor(s / 60), sec = Math.floor(s % 60);
    if (s < 3600) return m + "m " + sec + "s";
    const hr = Math.floor(s / 3600), min = Math.floor((s % 3600) / 60);
    if (s < 86400) return hr + "h " + min + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }
  function fmtBytes(b) {
    if (b === null || b === undefined) return "–";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b : b.toFixed(b < 10 ? 2 : 1)) + " " + u[i];
  }
  function fmtAgo(iso) {
    if (!iso) return "–";
    const s = (Date.now() - Date.parse(iso)) / 1000;
    return s < 1 ? "just now" : fmtDur(s) + " ago";
  }
  const pct = (v) => (v === null || v === undefined ? "–" : Math.round(v * 100) + "%");
  const humanize = (k) => k.replace(/_/g, " ").replace(/^./, (c) => c.toUpperCase());

  async function getJSON(path) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    try {
      const r = await fetch(path, { signal: ctl.signal, cache: "no-store" });
      if (!r.ok) throw new Error(path + ": HTTP " + r.status);
      return await r.json();
    } finally {
      clearTimeout(timer);
    }
  }

  // --- state kept across redraws ---
  const ui = {
    expanded: new Map(),   // group key -> the user's choice; absent: the default
    onlyDegraded: false,
    search: "",
    pages: [""],           // "after" cursors of the pages walked through
    clientsTimer: null,
    rates: null,           // the last rates, to redraw the chart on resize
  };

  // --- header, key figures, health, panels ---
  function setPill(el, state, text) {
    el.dataset.state = state;
    el.textContent = text;
  }

  function renderStatus(st) {
    $("node-id").textContent = st.node.id || "(no node id)";
    $("version").textContent = "linemq " + (st.node.version || "dev");
    $("uptime").textContent = fmtDur(st.node.uptime_seconds);
    document.title = (st.health.state === "ok" ? "" : "⚠ ") + (st.node.id || "linemq") + " · linemq status";

    const hs = st.health.state;
    setPill($("health-pill"), hs, hs === "ok" ? "healthy" : hs);
    setPill($("ready-pill"), st.health.ready ? "ok" : "failed", st.health.ready ? "ready" : "not ready");

    const b = st.broker, r = st.rates;
    $("kpi-clients").textContent = fmtInt(b.clients_connected);
    $("kpi-sessions").textContent = fmtInt(b.sessions) + " sessions · " + fmtInt(b.clients_parked) + " parked";
    $("kpi-in").textContent = fmtRate(r.messages_in_per_second) + "/s";
    $("kpi-in-total").textContent = fmtInt(b.messages_in) + " total · " + fmtBytes(r.bytes_in_per_second) + "/s";
    $("kpi-out").textContent = fmtRate(r.messages_out_per_second) + "/s";
    $("kpi-out-total").textContent = fmtInt(b.messages_out) + " total · " + fmtInt(b.acknowledged) + " acked";
    $("kpi-subs").textContent = fmtInt(b.subscriptions + b.shared_subscriptions);
    $("kpi-shared").textContent = fmtInt(b.shared_subscriptions) + " shared";
    $("kpi-groups").textContent = fmtInt(st.groups.total);
    $("kpi-degraded").textContent = st.groups.degraded ? st.groups.degraded + " degraded: " + st.groups.degraded_names.join(", ") : "all ok";
    $("kpi-groups-tile").classList.toggle("degraded", st.groups.degraded > 0);
    $("kpi-retained").textContent = fmtInt(b.retained);
    const dropped = b.dropped_qos0 + b.dropped_queue_full + b.dropped_too_large;
    $("kpi-dropped").textContent = fmtInt(dropped) + " dropped · " + fmtInt(b.expired) + " expired";

    const checks = $("checks");
    checks.replaceChildren();
    if (!st.health.checks.length) checks.append(h("li", { class: "muted" }, "no health checks registered"));
    for (const c of st.health.checks) {
      checks.append(h("li", { data: { check: c.name, state: c.state } },
        h("span", { class: "dot " + c.state, title: c.state }),
        h("span", { class: "name" }, c.name),
        h("span", { class: "since", title: c.since }, c.state + " for " + fmtAgo(c.since).replace(" ago", "")),
        c.reason ? h("span", { class: "reason" }, c.reason) : null));
    }
    const ls = $("listeners");
    ls.replaceChildren();
    if (!st.node.listeners.length) ls.append(h("li", { class: "muted" }, "none reported"));
    for (const l of st.node.listeners) ls.append(h("li", null, l.proto + "  " + l.addr));

    renderPanel($("storage"), st.storage, {
      file_size_bytes: ["File size", fmtBytes],
      bytes_written: ["Bytes written", fmtBytes],
      page_bytes_written: ["Written to flash", fmtBytes],
      disk_bytes_per_message: ["Disk bytes / message", (v) => v.toFixed(1)],
      sync_mode: ["Sync mode"],
    });
    renderPanel($("cluster"), st.cluster, {});
    renderPanel($("hw"), st.hw, {});
    ui.rates = r;
    drawChart(r.history, r.interval_seconds);
  }

  // renderPanel shows any object as a list, so the cluster and hardware
  // panels fill in when those parts exist without a change here.
  function renderPanel(dl, data, known) {
    dl.replaceChildren();
    if (!data || data.configured === false) {
      dl.append(h("div", { class: "note" }, (data && data.reason) || "not configured"));
      return;
    }
    for (const [k, v] of Object.entries(data)) {
      if (k === "configured") continue;
      const [label, fmt] = known[k] || [humanize(k)];
      let text, bad = false;
      if (fmt && typeof v === "number") text = fmt(v);
      else if (typeof v === "number") text = Number.isInteger(v) ? fmtInt(v) : v.toFixed(2);
      else if (typeof v === "boolean") { text = v ? "yes" : "no"; bad = v && /fail|error|open|down/.test(k); }
      else if (v === null || v === "") text = "–";
      else if (typeof v === "object") text = JSON.stringify(v);
      else text = String(v);
      dl.append(h("dt", null, label), h("dd", { class: bad ? "bad" : null, data: { key: k } }, text));
    }
  }

  // --- chart ---
  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  function niceMax(v) {
    if (v <= 1) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }
  function drawChart(hist, interval) {
    const c = $("chart");
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, ht = c.clientHeight;
    if (!w || !ht) return;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(ht * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(ht * dpr);
    }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, ht);
    const pad = { l: 52, r: 8, t: 8, b: 22 };
    const pw = w - pad.l - pad.r, ph = ht - pad.t - pad.b;
    const series = [[hist.messages_in, cssVar("--in")], [hist.messages_out, cssVar("--out")]];
    const top = niceMax(Math.max(1, ...hist.messages_in, ...hist.messages_out));
    const line = cssVar("--line"), muted = cssVar("--muted");
    g.font = "12px system-ui, sans-serif";
    g.fillStyle = muted;
    g.strokeStyle = line;
    g.lineWidth = 1;
    g.textAlign = "right";
    g.textBaseline = "middle";
    for (let i = 0; i <= 4; i++) {
      const y = pad.t + ph - (ph * i) / 4;
      g.beginPath(); g.moveTo(pad.l, Math.round(y) + 0.5); g.lineTo(w - pad.r, Math.round(y) + 0.5); g.stroke();
      g.fillText(fmtRate((top * i) / 4), pad.l - 8, y);
    }
    g.textAlign = "center";
    g.textBaseline = "alphabetic";
    const span = HISTORY * (interval || 1);
    const ticks = w < 500 ? 3 : 5; // fewer labels on a phone
    for (let i = 0; i <= ticks; i++) {
      const x = pad.l + (pw * i) / ticks;
      const ago = span - (span * i) / ticks;
      const label = span < 120 ? Math.round(ago) + " s" : Math.round(ago / 60) + " min";
      g.textAlign = i === 0 ? "left" : i === ticks ? "right" : "center";
      g.fillText(i === ticks ? "now" : "−" + label, i === 0 ? pad.l : x, ht - 5);
    }
    const xAt = (i, n) => pad.l + pw - ((n - 1 - i) * pw) / (HISTORY - 1);
    const yAt = (v) => pad.t + ph - (ph * v) / top;
    for (const [vals, color] of series) {
      const n = vals.length;
      if (n < 2) continue;
      g.beginPath();
      for (let i = 0; i < n; i++) (i ? g.lineTo : g.moveTo).call(g, xAt(i, n), yAt(vals[i]));
      g.strokeStyle = color;
      g.lineWidth = 2;
      g.lineJoin = "round";
      g.stroke();
      g.lineTo(xAt(n - 1, n), pad.t + ph);
      g.lineTo(xAt(0, n), pad.t + ph);
      g.closePath();
      g.globalAlpha = 0.1;
      g.fillStyle = color;
      g.fill();
      g.globalAlpha = 1;
    }
  }

  // --- share groups ---
  const groupKey = (g) => g.name + "\u0000" + g.filter;

  function isOpen(g, count) {
    const k = groupKey(g);
    if (ui.expanded.has(k)) return ui.expanded.get(k);
    return count <= 3 || g.state !== "ok"; // few groups, or one that needs looking at
  }

  function renderGroups(groups) {
    const degraded = groups.filter((g) => g.state !== "ok").length;
    $("groups-count").textContent = groups.length + (groups.length === 1 ? " group" : " groups") +
      (degraded ? " · " + degraded + " degraded" : "");
    const shown = groups
      .filter((g) => !ui.onlyDegraded || g.state !== "ok")
      .sort((a, b) => (a.state === "ok") - (b.state === "ok") || a.name.localeCompare(b.name) || a.filter.localeCompare(b.filter));
    const body = $("groups-body");
    const rows = [];
    if (!shown.length) {
      rows.push(h("tr", null, h("td", { colspan: 11, class: "muted" },
        groups.length ? "no degraded group" : "no share groups: nothing subscribes with $share/…")));
    }
    for (const g of shown) {
      const open = isOpen(g, groups.length);
      const deg = g.state !== "ok";
      const k = groupKey(g);
      rows.push(h("tr", {
        class: "group" + (deg ? " degraded" : "") + (open ? " open" : ""),
        data: { group: g.name, filter: g.filter, state: g.state },
        title: deg ? g.reasons.join("\n") : "",
        onclick: () => { ui.expanded.set(k, !open); renderGroups(lastGroups); },
      },
        h("td", null, h("span", { class: "caret" }, "▸")),
        h("td", { class: "gname" }, g.name),
        h("td", { class: "mono" }, g.filter || "–"),
        h("td", null, g.strategy || "–"),
        h("td", { class: "num", data: { field: "members" } }, g.member_count + (g.min_members ? " / min " + g.min_members : "")),
        h("td", { class: "num", data: { field: "rate_in" } }, fmtRate(g.rate_in)),
        h("td", { class: "num", data: { field: "delivered" } }, fmtInt(g.delivered)),
        h("td", { class: "num", data: { field: "in_flight" } }, fmtInt(g.in_flight)),
        h("td", { class: "num", data: { field: "queued" } }, fmtInt(g.queued)),
        h("td", { class: "num" }, fmtDur(g.oldest_queued_seconds)),
        h("td", { class: "num" }, fmtInt(g.dropped))));
      if (deg) {
        rows.push(h("tr", { class: "reasons", data: { group: g.name } },
          h("td", null), h("td", { colspan: 10 }, h("ul", null, g.reasons.map((r) => h("li", null, r))))));
      }
      if (open) rows.push(membersRow(g));
    }
    body.replaceChildren(...rows);
  }

  function membersRow(g) {
    const head = h("tr", null, ["Member", "Node", "", "In flight / window", "Queued", "Oldest", "Delivered", "Rate", "Share", "Redeliv.", "Disconn.", "Status"]
      .map((t, i) => h("th", { class: i >= 4 && i <= 10 ? "num" : null }, t)));
    const rows = g.members.map((m) => {
      const deg = m.state !== "ok";
      const win = m.receive_maximum || 0;
      const used = m.session_in_flight;
      const fill = win ? Math.min(1, used / win) : 0;
      return h("tr", { class: "member" + (deg ? " degraded" : ""), data: { member: m.client_id, state: m.state } },
        h("td", { class: "mono" }, m.client_id),
        h("td", null, m.node),
        h("td", null, h("span", { class: "badge " + (m.connected ? "on" : "off") }, m.connected ? "online" : "offline")),
        h("td", { data: { field: "in_flight" }, title: fmtInt(m.in_flight) + " of this group's messages in flight" },
          win ? fmtInt(used) + " / " + fmtInt(win) : fmtInt(m.in_flight),
          win && win <= 1000 ? h("span", { class: "bar" + (fill >= 1 ? " full" : "") }, h("span", { style: { width: Math.round(fill * 100) + "%" } })) : null),
        h("td", { class: "num", data: { field: "queued" } }, fmtInt(m.queued)),
        h("td", { class: "num" }, fmtDur(m.oldest_queued_seconds)),
        h("td", { class: "num", data: { field: "delivered" } }, fmtInt(m.delivered)),
        h("td", { class: "num" }, fmtRate(m.delivered_rate) + "/s"),
        h("td", { class: "num", title: m.expected_share === null ? "not judged yet" : "expected " + pct(m.expected_share) }, pct(m.share)),
        h("td", { class: "num" }, fmtInt(m.redeliveries)),
        h("td", { class: "num" }, fmtInt(m.disconnects)),
        h("td", { class: deg ? "why" : "muted" }, deg ? m.reasons.join("; ") : "ok"));
    });
    return h("tr", { class: "members", data: { group: g.name } },
      h("td", { colspan: 11 }, h("table", { class: "members-table" }, h("thead", null, head), h("tbody", null, rows))));
  }

  // --- clients ---
  async function loadClients() {
    clearTimeout(ui.clientsTimer);
    const after = ui.pages[ui.pages.length - 1];
    const q = new URLSearchParams({ limit: CLIENTS_PAGE });
    if (ui.search) q.set("q", ui.search);
    if (after) q.set("after", after);
    try {
      renderClients(await getJSON("api/v1/clients?" + q));
    } catch (e) {
      /* the status poll shows the connection state */
    }
    ui.clientsTimer = setTimeout(loadClients, CLIENTS_MS);
  }

  function renderClients(data) {
    $("clients-count").textContent = ui.search
      ? fmtInt(data.total) + " matching"
      : fmtInt(data.total) + (data.total === 1 ? " session" : " sessions");
    const rows = data.clients.map((c) => h("tr", { class: c.connected ? null : "muted", data: { client: c.client_id } },
      h("td", { class: "mono" }, c.client_id, c.username ? h("span", { class: "muted" }, "  " + c.username) : null),
      h("td", { class: "mono" }, c.address || "–"),
      h("td", null, c.protocol),
      h("td", { class: "num" }, c.connected ? fmtDur(c.keep_alive_seconds) : "–"),
      h("td", { class: "num" }, fmtInt(c.subscriptions)),
      h("td", { class: "num" }, fmtInt(c.in_flight) + (c.receive_maximum ? " / " + fmtInt(c.receive_maximum) : "")),
      h("td", { class: "num" }, fmtInt(c.queued)),
      h("td", { title: c.connected_since || c.disconnected_at || "" },
        c.connected ? fmtAgo(c.connected_since) : "offline " + fmtAgo(c.disconnected_at))));
    if (!rows.length) rows.push(h("tr", null, h("td", { colspan: 8, class: "muted" }, ui.search ? "no client matches" : "no clients")));
    $("clients-body").replaceChildren(...rows);
    $("clients-next").disabled = !data.next;
    $("clients-next").dataset.next = data.next || "";
    $("clients-first").disabled = ui.pages.length <= 1;
  }

  // --- the poll ---
  let lastGroups = [];
  function setLive(ok) {
    const l = $("live");
    l.classList.remove("on");
    void l.offsetWidth; // restart the beat animation
    l.classList.toggle("on", ok);
    l.classList.toggle("stale", !ok);
    l.title = ok ? "updated " + new Date().toLocaleTimeString() : "no answer from the gateway";
    $("banner").classList.toggle("hidden", ok);
  }

  async function poll() {
    try {
      const [st, gr] = await Promise.all([getJSON("api/v1/status"), getJSON("api/v1/groups")]);
      renderStatus(st);
      lastGroups = gr.groups;
      renderGroups(lastGroups);
      setLive(true);
    } catch (e) {
      setLive(false);
    }
    setTimeout(poll, POLL_MS);
  }

  function init() {
    $("only-degraded").addEventListener("change", (e) => {
      ui.onlyDegraded = e.target.checked;
      renderGroups(lastGroups);
    });
    let debounce = null;
    $("client-search").addEventListener("input", (e) => {
      clearTimeout(debounce);
      debounce = setTimeout(() => {
        ui.search = e.target.value.trim();
        ui.pages = [""];
        loadClients();
      }, 200);
    });
    $("clients-next").addEventListener("click", (e) => {
      if (!e.target.dataset.next) return;
      ui.pages.push(e.target.dataset.next);
      loadClients();
    });
    $("clients-first").addEventListener("click", () => {
      ui.pages = [""];
      loadClients();
    });
    window.addEventListener("resize", () => ui.rates && drawChart(ui.rates.history, ui.rates.interval_seconds));
    poll();
    loadClients();
  }
  init();
})();
