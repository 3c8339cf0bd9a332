// linemq status page: polls the JSON API once a second and redraws. Plain
// DOM, no framework, no external assets. Every string that came from a
// client (ids, usernames, topic filters) goes in through textContent only.
//
// Kept cheap for the browser (it may run on the gateway's own cores): each
// redraw builds the new rows off the document and patch() copies into the
// page only the text and attributes that changed, so an unchanged cell
// costs no layout or paint; the chart is redrawn at most once a second, at
// a device pixel ratio of at most 1; nothing reads layout after writing it;
// and while the tab is hidden nothing is fetched or drawn.
"use strict";
(() => {
  const POLL_MS = 1000;       // status and groups
  const CLIENTS_MS = 3000;    // the clients table
  const TIMEOUT_MS = 4000;    // one request
  const CLIENTS_PAGE = 50;
  const HISTORY = 300;        // samples the chart spans (the server's HistoryLength)
  const SPARKPLUG_OFF_POLLS = 30; // with the Sparkplug awareness off, ask again only every this many polls
  const SPARKPLUG_ROWS = 200;     // edge node rows drawn at most (a plant may have thousands)

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

  // patch makes the node old look like neu, touching only what differs:
  // text, attributes, children (by position). Inline styles go through the
  // CSSOM (the page's CSP refuses style attributes).
  function patch(old, neu) {
    if (old.nodeType !== neu.nodeType || old.nodeName !== neu.nodeName) {
      old.replaceWith(neu);
      return;
    }
    if (old.nodeType !== Node.ELEMENT_NODE) {
      if (old.data !== neu.data) old.data = neu.data;
      return;
    }
    for (const a of Array.from(old.attributes)) {
      if (!neu.hasAttribute(a.name)) old.removeAttribute(a.name);
    }
    for (const a of neu.attributes) {
      if (a.name === "style") {
        if (old.style.cssText !== neu.style.cssText) old.style.cssText = neu.style.cssText;
      } else if (old.getAttribute(a.name) !== a.value) {
        old.setAttribute(a.name, a.value);
      }
    }
    patchChildren(old, Array.from(neu.childNodes));
  }
  // patchChildren makes parent's children look like kids.
  function patchChildren(parent, kids) {
    const cur = parent.childNodes;
    kids.forEach((k, i) => (i < cur.length ? patch(cur[i], k) : parent.appendChild(k)));
    while (cur.length > kids.length) parent.lastChild.remove();
  }
  // setText changes an element's text only when it differs.
  function setText(el, text) {
    text = String(text);
    if (el.textContent !== text) el.textContent = text;
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

  // apiURL is path under the page's own address without a user name and
  // password in it: a page opened as http://user:pass@host/ would otherwise
  // have every fetch refused before it is sent.
  function apiURL(path) {
    const u = new URL(path, location.href);
    u.username = "";
    u.password = "";
    return u.href;
  }

  // getJSON fetches path; an answer other than 2xx throws an Error whose
  // status is the HTTP status, so the banner can tell a refused login from
  // a gateway that does not answer.
  async function getJSON(path) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    try {
      const r = await fetch(apiURL(path), { signal: ctl.signal, cache: "no-store" });
      if (!r.ok) {
        const e = new Error(path + ": HTTP " + r.status);
        e.status = r.status;
        throw e;
      }
      return await r.json();
    } finally {
      clearTimeout(timer);
    }
  }

  // postJSON posts body as JSON to path and returns the status and the
  // decoded answer (null when it is not JSON). Unlike getJSON it does not
  // throw on a refusal: the caller shows the answer's error where the user
  // clicked, and a refused action does not stop the page's polls.
  async function postJSON(path, body) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    try {
      const r = await fetch(apiURL(path), {
        method: "POST", signal: ctl.signal, cache: "no-store",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      });
      let data = null;
      try { data = await r.json(); } catch (_) { /* not JSON: the status says enough */ }
      return { ok: r.ok, status: r.status, data };
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
    refused: false,        // the login was refused: polling has stopped
    sparkplug: null,       // the last api/v1/sparkplug answer, to redraw on a rebirth's outcome
    sparkplugWait: 0,      // polls to skip before asking api/v1/sparkplug again
    rebirths: new Map(),   // edge node key -> the last rebirth's outcome {pending, ok, text, title}
  };

  // refusedLogin reports whether err (from getJSON) is the gateway turning
  // the login away. The page then stops polling: each request would bring
  // up the browser's login dialog again, every second, and lengthen the
  // throttle of an address that keeps failing. A reload starts afresh.
  function refusedLogin(err) {
    return err && (err.status === 401 || err.status === 403 || err.status === 429);
  }

  // --- header, key figures, health, panels ---
  function setPill(el, state, text) {
    if (el.dataset.state !== state) el.dataset.state = state;
    setText(el, text);
  }

  function renderStatus(st) {
    setText($("node-id"), st.node.id || "(no node id)");
    setText($("version"), "linemq " + (st.node.version || "dev"));
    setText($("uptime"), fmtDur(st.node.uptime_seconds));
    const title = (st.health.state === "ok" ? "" : "⚠ ") + (st.node.id || "linemq") + " · linemq status";
    if (document.title !== title) document.title = title;

    const hs = st.health.state;
    setPill($("health-pill"), hs, hs === "ok" ? "healthy" : hs);
    setPill($("ready-pill"), st.health.ready ? "ok" : "failed", st.health.ready ? "ready" : "not ready");

    const b = st.broker, r = st.rates;
    setText($("kpi-clients"), fmtInt(b.clients_connected));
    setText($("kpi-sessions"), fmtInt(b.sessions) + " sessions · " + fmtInt(b.clients_parked) + " parked");
    setText($("kpi-in"), fmtRate(r.messages_in_per_second) + "/s");
    setText($("kpi-in-total"), fmtInt(b.messages_in) + " total · " + fmtBytes(r.bytes_in_per_second) + "/s");
    setText($("kpi-out"), fmtRate(r.messages_out_per_second) + "/s");
    setText($("kpi-out-total"), fmtInt(b.messages_out) + " total · " + fmtInt(b.acknowledged) + " acked");
    setText($("kpi-subs"), fmtInt(b.subscriptions + b.shared_subscriptions));
    setText($("kpi-shared"), fmtInt(b.shared_subscriptions) + " shared");
    setText($("kpi-groups"), fmtInt(st.groups.total));
    setText($("kpi-degraded"), st.groups.degraded ? st.groups.degraded + " degraded: " + st.groups.degraded_names.join(", ") : "all ok");
    const tile = $("kpi-groups-tile");
    if (tile.classList.contains("degraded") !== st.groups.degraded > 0) tile.classList.toggle("degraded", st.groups.degraded > 0);
    setText($("kpi-retained"), fmtInt(b.retained));
    const dropped = b.dropped_qos0 + b.dropped_queue_full + b.dropped_too_large;
    setText($("kpi-dropped"), fmtInt(dropped) + " dropped · " + fmtInt(b.expired) + " expired");

    const checks = [];
    if (!st.health.checks.length) checks.push(h("li", { class: "muted" }, "no health checks registered"));
    for (const c of st.health.checks) {
      checks.push(h("li", { data: { check: c.name, state: c.state } },
        h("span", { class: "dot " + c.state, title: c.state }),
        h("span", { class: "name" }, c.name),
        h("span", { class: "since", title: c.since }, c.state + " for " + fmtAgo(c.since).replace(" ago", "")),
        c.reason ? h("span", { class: "reason" }, c.reason) : null));
    }
    patchChildren($("checks"), checks);
    const ls = st.node.listeners.map((l) => h("li", null, l.proto + "  " + l.addr));
    if (!ls.length) ls.push(h("li", { class: "muted" }, "none reported"));
    patchChildren($("listeners"), ls);

    renderPanel($("storage"), st.storage, {
      file_size_bytes: ["File size", fmtBytes],
      bytes_written: ["Bytes written", fmtBytes],
      page_bytes_written: ["Written to flash", fmtBytes],
      disk_bytes_per_message: ["Disk bytes / message", (v) => v.toFixed(1)],
      sync_mode: ["Sync mode"],
    });
    renderCluster($("cluster"), st.cluster);
    renderHW($("hw"), st.hw);
    renderUpdate($("update"), st.update);
    renderBridges(st.bridges || []);
    // A panel of another part goes here: a <section> in index.html and
    // one line calling renderPanel, or a renderer of its own like
    // renderCluster or renderBridges.
    ui.rates = r;
    drawChart(r.history, r.interval_seconds);
  }

  // renderPanel shows any object as a list, so the cluster and hardware
  // panels fill in when those parts exist without a change here.
  function renderPanel(dl, data, known) {
    patchChildren(dl, panelItems(data, known));
  }
  function panelItems(data, known) {
    if (!data || data.configured === false) {
      return [h("div", { class: "note" }, (data && data.reason) || "not configured")];
    }
    const items = [];
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
      items.push(h("dt", null, label), h("dd", { class: bad ? "bad" : null, data: { key: k } }, text));
    }
    return items;
  }

  // renderHW shows the board, each LED (its pin or "simulated", its
  // pattern) and the watchdog; a gateway without hardware gets the API's
  // reason, as the other panels do.
  function renderHW(dl, hw) {
    if (!hw || hw.configured === false || !hw.watchdog) {
      patchChildren(dl, panelItems(hw, {}));
      return;
    }
    const w = hw.watchdog, items = [h("dt", null, "Board"), h("dd", null, hw.board || "–")];
    for (const l of hw.leds || []) {
      items.push(h("dt", null, humanize(l.name) + " LED"),
        h("dd", { data: { key: "led-" + l.name } }, (l.device || "–") + " · " + l.pattern + (l.lit ? " · lit" : "")));
    }
    const fed = (w.feeders || []).length > 0;
    items.push(h("dt", null, "Watchdog"),
      h("dd", { class: fed && !w.feeding ? "bad" : null, data: { key: "watchdog" }, title: w.reason || "" },
        !fed ? "none" : w.feeding ? "fed every " + fmtDur(w.period_seconds) + " · last " + fmtAgo(w.last_feed)
          : "not fed: " + (w.reason || "health check failing") + " (since " + fmtAgo(w.since) + ")"));
    if (fed) items.push(h("dt", null, "Fed"), h("dd", { class: "mono" }, w.feeders.join(", ")));
    if ((w.errors || []).length) items.push(h("dt", null, "Errors"), h("dd", { class: "bad" }, w.errors.join("; ")));
    patchChildren(dl, items);
  }

  // renderUpdate shows the version running and where from, the one in
  // force after a restart, a trial and how long it has left, and the last
  // commit and rollback (docs/updates.md).
  function renderUpdate(dl, u) {
    if (!u || u.configured === false) {
      patchChildren(dl, panelItems(u, {}));
      return;
    }
    const row = (label, key, text, bad) => [h("dt", null, label), h("dd", { class: bad ? "bad" : null, data: { key: key } }, text)];
    const items = [...row("Running", "running", u.version + " · " + u.running_in), ...row("In force", "committed", u.committed)];
    if (u.trial) {
      let text = u.trial + " · installed " + fmtAgo(u.trial_since);
      if (u.restart_pending) text = u.trial + " · restarting into it";
      else if (u.trial_running && u.trial_failing) text = u.trial + " · failing for " + fmtAgo(u.trial_failing_since).replace(" ago", "") + ": " + u.trial_failing;
      else if (u.trial_running) text = u.trial + " · healthy for " + fmtDur(u.trial_healthy_seconds) + " · commits in " + fmtDur(u.trial_remaining_seconds);
      else text += " · goes on trial at the next start";
      items.push(...row("On trial", "trial", text, u.trial_running && !!u.trial_failing));
    }
    const ev = (e) => (e ? e.version + " · " + fmtAgo(e.at) + (e.reason ? " · " + e.reason : "") : "–");
    const c = u.last_commit, r = u.last_rollback;
    items.push(...row("Last commit", "last-commit", ev(c)),
      ...row("Last rollback", "last-rollback", ev(r), !!r && (!c || Date.parse(r.at) > Date.parse(c.at))),
      ...row("Uploads", "uploads", u.uploads ? "POST /api/v1/update by update.admins" : "off (update.admins)"));
    if (u.error) items.push(...row("Error", "error", u.error, true));
    patchChildren(dl, items);
  }

  // renderCluster shows a clustered gateway's nodes (with this node's
  // stream to each), its registry and etcd; anything else as a list.
  function renderCluster(box, c) {
    if (!c || c.configured === false || !Array.isArray(c.nodes)) {
      patchChildren(box, [h("dl", { class: "panel" }, panelItems(c, {}))]);
      return;
    }
    const ms = (s) => (s ? (s * 1000 < 10 ? (s * 1000).toFixed(2) : Math.round(s * 1000)) + " ms" : "–");
    const rows = c.nodes.map((n) => h("tr", { class: n.health !== "ok" ? "degraded" : null, data: { node: n.name, state: n.health } },
      h("td", { class: "mono" }, n.name, n.self ? h("span", { class: "muted" }, " (this)") : null),
      h("td", { class: "mono" }, n.address || "–"),
      h("td", null, n.version || "–"),
      h("td", { title: n.reason || "" }, h("span", { class: "dot " + n.health }),
        n.missing ? " missing for " + fmtAgo(n.missing_since).replace(" ago", "") : " " + n.health),
      h("td", null, n.self ? "–" : n.breaker || "–"),
      h("td", { class: "num", title: "largest " + ms(n.rtt_max_seconds) }, n.self ? "–" : ms(n.rtt_seconds)),
      h("td", { class: "why", title: n.last_error || "" }, n.health === "ok" ? "" : n.reason || n.last_error || "")));
    const r = c.registry || {}, e = c.etcd || {};
    const eps = (e.endpoints || []).map((p) => h("li", { class: p.up === false || p.error ? "bad" : null, title: p.error || "" },
      h("span", { class: "mono" }, p.member || p.endpoint), p.leader ? " leader" : "",
      p.up === false ? " · down" : p.error ? " · " + p.error : " · up · " + (p.version || "") + " · " + fmtBytes(p.db_size_bytes) + " · term " + p.raft_term + " · " + ms(p.rtt_seconds)));
    patchChildren(box, [
      h("div", { class: "table-wrap" }, h("table", { class: "nodes" },
        h("thead", null, h("tr", null, ["Node", "Address", "Version", "Health", "Breaker", "Round trip", ""].map((t, i) => h("th", { class: i === 5 ? "num" : null }, t)))),
        h("tbody", null, rows))),
      h("dl", { class: "panel" },
        h("dt", null, "Registry"), h("dd", { class: r.state === "healthy" ? null : "bad", title: r.reason || "" },
          (r.state || "–") + " · rev " + fmtInt(r.revision) + " · lag " + ms(r.lag_seconds) + " (max " + ms(r.lag_max_seconds) + ")"),
        h("dt", null, "Registered"), h("dd", null, fmtInt(r.members) + " members · " + fmtInt(r.routes) + " routes · " + fmtInt(r.sessions) + " sessions"),
        h("dt", null, "etcd"), h("dd", { class: e.healthy ? null : "bad", title: e.error || "" },
          (e.margin || (e.healthy ? "healthy" : "unhealthy")) + " · leader " + (e.leader || "none") + " · checked " + fmtAgo(e.checked)),
        // Copies of persistent sessions on other gateways: a session
        // below its count would be lost with this gateway's SD card.
        ...(c.replicas && c.replicas.count ? [
          h("dt", null, "Replicas"),
          h("dd", { class: c.replicas.below_count ? "bad" : null, data: { replicas: "" },
            title: fmtInt(c.replicas.resyncs) + " sent whole · " + fmtInt(c.replicas.unreplicated) + " changes without their replica · " +
              fmtInt(c.replicas.adopted) + " adopted from gone gateways" },
            fmtInt(c.replicas.sessions) + " sessions × " + c.replicas.count +
            (c.replicas.below_count ? " · " + fmtInt(c.replicas.below_count) + " below their replica count" : " · all in step") +
            " · keeping " + fmtInt(c.replicas.held_sessions) + " for others" +
            (c.replicas.failing_over ? " · adopting the sessions of " + fmtInt(c.replicas.failing_over) + " gone gateway(s)" : ""))] : []),
        // The line's update: one gateway at a time, while the line is whole.
        ...(c.update && (c.update.holder || c.update.waiting) ? [
          h("dt", null, "Update"),
          h("dd", { data: { key: "line-update" } }, c.update.holder
            ? c.update.holder.node + " updating to " + c.update.holder.version + " since " + fmtAgo(c.update.holder.since).replace(" ago", "")
            : "", c.update.waiting ? (c.update.holder ? " · " : "") + "this gateway: " + c.update.waiting : "")] : []),
        ...(c.update && c.update.halted ? [
          h("dt", null, "Update halted"),
          h("dd", { class: "bad", data: { key: "line-update-halted" } },
            c.update.halted.version + " rolled back on " + c.update.halted.node + " " + fmtAgo(c.update.halted.at) + ": " + c.update.halted.reason)] : []),
        // What this gateway keeps for another one's subscribers while it
        // is away: nothing, normally.
        ...(c.forwards || []).filter((f) => f.queued || f.dropped || f.expired).flatMap((f) => [
          h("dt", null, "Kept for " + f.node),
          h("dd", { class: f.dropped || f.expired ? "bad" : null, data: { forwards: f.node },
            title: fmtInt(f.handed) + " handed over · " + fmtInt(f.resent) + " sent again with DUP" },
            fmtInt(f.queued) + " messages · " + fmtBytes(f.bytes) + (f.queued ? " · oldest " + fmtDur(f.oldest_ms / 1000) : "") +
            (f.dropped + f.expired ? " · " + fmtInt(f.dropped + f.expired) + " dropped past cluster.forwards bounds" : ""))])),
      h("ul", { class: "endpoints" }, eps),
    ]);
  }

  // renderBridges shows one row per uplink bridge; the card is hidden
  // while no bridge is configured. A bridge that is not connected is
  // highlighted as degraded things are (it keeps queueing meanwhile).
  const bridgeDot = { connected: "ok", connecting: "degraded", down: "failed", stopped: "failed" };
  function renderBridges(bridges) {
    const card = $("bridges-card");
    if (card.classList.contains("hidden") !== !bridges.length) card.classList.toggle("hidden", !bridges.length);
    if (!bridges.length) return;
    const down = bridges.filter((b) => b.state !== "connected").length;
    setText($("bridges-count"), bridges.length + (bridges.length === 1 ? " bridge" : " bridges") +
      (down ? " · " + down + " not connected" : ""));
    const rows = bridges.map((b) => {
      const ok = b.state === "connected";
      const drops = b.dropped + b.expired + b.rejected + b.dropped_qos0;
      return h("tr", { class: ok ? null : "degraded", data: { bridge: b.name, state: b.state } },
        h("td", { class: "bname" }, b.name, h("span", { class: "muted" }, b.protocol === 311 ? " 3.1.1" : " v5")),
        h("td", { data: { field: "state" }, title: b.since ? "since " + b.since : "" },
          h("span", { class: "dot " + (bridgeDot[b.state] || "degraded") }), " " + b.state,
          ok ? null : h("span", { class: "muted" }, " " + fmtAgo(b.since).replace(" ago", ""))),
        h("td", { class: "mono", data: { field: "remote" } }, (b.remote || []).join(", ") || "–"),
        h("td", { class: "num", data: { field: "queued" } }, fmtInt(b.queued) + " · " + fmtBytes(b.queued_bytes)),
        h("td", { class: "num", data: { field: "oldest" } }, fmtDur(b.oldest_queued_seconds)),
        h("td", { class: "num", data: { field: "in_flight" } }, fmtInt(b.in_flight)),
        h("td", { class: "num", data: { field: "sent_rate" }, title: fmtInt(b.sent) + " sent" }, fmtRate(b.sent_rate)),
        h("td", { class: "num", data: { field: "received_rate" }, title: fmtInt(b.received) + " received" }, fmtRate(b.received_rate)),
        h("td", { class: "num", data: { field: "dropped" },
          title: fmtInt(b.dropped) + " queue full · " + fmtInt(b.expired) + " expired · " + fmtInt(b.rejected) + " rejected · " + fmtInt(b.dropped_qos0) + " QoS 0 while down" },
          fmtInt(drops)),
        h("td", { class: b.last_error ? "why" : "muted", data: { field: "last_error" }, title: b.last_error_at || "" },
          b.last_error ? b.last_error + " · " + fmtAgo(b.last_error_at) : "none"));
    });
    patchChildren($("bridges-body"), rows);
  }

  // --- Sparkplug ---
  // sparkplugTime is an API time, or null for Go's zero time (never).
  const sparkplugTime = (iso) => (iso && !iso.startsWith("0001-") ? iso : null);
  const edgeKey = (group, edgeNode) => group + "\u0000" + edgeNode;
  const plural = (n, one, many) => fmtInt(n) + " " + (n === 1 ? one : many || one + "s");
  // join puts " · " between parts, so a line reads (and copies) as text.
  const join = (parts) => parts.flatMap((p, i) => (i ? [" · ", p] : [p]));

  // renderSparkplug shows the Sparkplug B groups, edge nodes and primary
  // hosts the gateway tracks (api/v1/sparkplug). The card is hidden while
  // the awareness is off or nothing of Sparkplug has been seen; its
  // data-state says which ("off", "empty", "on"). Each edge node row has a
  // Rebirth button; its clicks are taken by the table's listener (see
  // init), since a redraw patches rows in place and keeps no listener of
  // a new row's own.
  function renderSparkplug(sp) {
    ui.sparkplug = sp;
    const card = $("sparkplug-card");
    const nodes = (sp && sp.enabled && sp.edge_nodes) || [], hosts = (sp && sp.enabled && sp.hosts) || [];
    const state = !sp || !sp.enabled ? "off" : nodes.length || hosts.length ? "on" : "empty";
    if (card.dataset.state !== state) card.dataset.state = state;
    if (card.classList.contains("hidden") !== (state !== "on")) card.classList.toggle("hidden", state !== "on");
    if (state !== "on") return;

    const groups = sp.groups || [];
    const online = nodes.filter((n) => n.online).length;
    const mismatched = nodes.filter((n) => n.bdseq_mismatch).length;
    setText($("sparkplug-count"), join([plural(nodes.length, "edge node"), online + " online", plural(groups.length, "group")]
      .concat(mismatched ? [plural(mismatched, "bdSeq mismatch", "bdSeq mismatches")] : [])).join(""));

    patchChildren($("sparkplug-groups"), groups.map((g) => {
      const down = g.online < g.edge_nodes;
      return h("li", { class: down || g.bdseq_mismatches ? "degraded" : null, data: { group: g.group } },
        h("span", { class: "gname" }, g.group), " ",
        join([
          h("span", { class: down ? "warn" : null, data: { field: "online" } }, fmtInt(g.online) + " / " + fmtInt(g.edge_nodes) + " edge nodes online"),
          h("span", { data: { field: "rate" }, title: fmtInt(g.messages) + " messages" }, fmtRate(g.messages_per_second) + " msg/s"),
          h("span", { class: g.seq_gaps ? "warn" : null, data: { field: "seq_gaps" } }, plural(g.seq_gaps, "seq gap")),
          h("span", { class: g.bdseq_mismatches ? "bad" : null, data: { field: "bdseq_mismatches" },
            title: "edge nodes whose NBIRTH bdSeq is not the one of the NDEATH they registered as will" },
            plural(g.bdseq_mismatches, "bdSeq mismatch", "bdSeq mismatches")),
          h("span", { class: "muted", data: { field: "births" } }, plural(g.births, "birth") + ", " + plural(g.deaths, "death")),
        ]));
    }));

    // A plant may have thousands of edge nodes: draw at most
    // SPARKPLUG_ROWS, those that need looking at (offline, bdSeq
    // mismatch) first, each part in the API's order (group, edge node).
    const bad = (n) => !n.online || n.bdseq_mismatch;
    const shown = nodes.length <= SPARKPLUG_ROWS ? nodes
      : nodes.filter(bad).concat(nodes.filter((n) => !bad(n))).slice(0, SPARKPLUG_ROWS);
    setText($("sparkplug-edges-note"), shown.length < nodes.length
      ? "first " + fmtInt(shown.length) + " of " + fmtInt(nodes.length) + ", offline and mismatched first" : "");
    const rows = shown.map((n) => {
      const out = ui.rebirths.get(edgeKey(n.group, n.edge_node));
      const since = sparkplugTime(n.since), seen = sparkplugTime(n.last_seen);
      const seq = (v) => (v >= 0 ? String(v) : "–");
      return h("tr", { class: bad(n) ? "degraded" : null, data: { group: n.group, edgeNode: n.edge_node, state: n.online ? "online" : "offline" } },
        h("td", { data: { field: "group" } }, n.group),
        h("td", { class: "ename mono", title: n.client ? "born by client " + n.client : "" }, n.edge_node),
        h("td", { data: { field: "state" }, title: since ? "since " + since : "" },
          h("span", { class: "badge " + (n.online ? "on" : "off") }, n.online ? "online" : "offline"),
          since ? h("span", { class: "muted" }, " " + fmtAgo(since).replace(" ago", "")) : null),
        h("td", { class: "mono", data: { field: "gateway" } }, n.gateway || "–"),
        h("td", { class: "num" + (n.bdseq_mismatch ? " bad" : ""), data: { field: "bdseq" },
          title: n.bdseq_mismatch ? "the NBIRTH's bdSeq is not the one of the NDEATH registered as will: the edge node's death will not be recognised"
            : "bdSeq of the last NBIRTH · of the NDEATH registered as will" },
          seq(n.bdseq), n.will_bdseq >= 0 ? h("span", { class: n.bdseq_mismatch ? null : "muted" }, " · will " + n.will_bdseq) : null),
        h("td", { class: "num", data: { field: "births" } }, fmtInt(n.births)),
        h("td", { class: "num", data: { field: "deaths" } }, fmtInt(n.deaths)),
        h("td", { class: "num" + (n.seq_gaps ? " warn" : ""), data: { field: "seq_gaps" } }, fmtInt(n.seq_gaps)),
        h("td", { class: "num" + (n.out_of_order ? " warn" : ""), data: { field: "out_of_order" } }, fmtInt(n.out_of_order)),
        h("td", { class: "num", data: { field: "devices" } }, fmtInt(n.devices_online) + " / " + fmtInt(n.devices)),
        h("td", { class: "num", data: { field: "rate" },
          title: fmtInt(n.messages) + " messages" + (n.invalid ? " · " + fmtInt(n.invalid) + " not Sparkplug" : "") + (n.held_back ? " · " + fmtInt(n.held_back) + " held back" : "") },
          fmtRate(n.messages_per_second)),
        h("td", { data: { field: "last_seen" }, title: seen || "" }, fmtAgo(seen)),
        h("td", { class: "rebirth" },
          h("button", { type: "button", class: "rebirth", disabled: !!(out && out.pending),
            data: { group: n.group, edgeNode: n.edge_node },
            "aria-label": "Rebirth edge node " + n.edge_node + " of group " + n.group,
            title: "Ask the edge node to publish its births again (NCMD Node Control/Rebirth)" }, "Rebirth"),
          h("span", { class: "outcome" + (out && !out.pending ? (out.ok ? " ok" : " bad") : ""), role: "status",
            data: { field: "rebirth" }, title: (out && out.title) || "" }, out ? out.text : "")));
    });
    patchChildren($("sparkplug-body"), rows);

    const hs = hosts.map((x) => {
      const since = sparkplugTime(x.since);
      return h("li", { data: { host: x.host, state: x.online ? "online" : "offline" }, title: since ? "since " + since : "" },
        h("span", { class: "mono" }, x.host), " ",
        h("span", { class: "badge " + (x.online ? "on" : "off") }, x.online ? "online" : "offline"),
        since ? h("span", { class: "muted" }, " for " + fmtAgo(since).replace(" ago", "")) : null);
    });
    if (!hs.length) hs.push(h("li", { class: "muted" }, "no primary host has published its STATE"));
    patchChildren($("sparkplug-hosts"), hs);

    patchChildren($("sparkplug-totals"), [
      ["not_sparkplug", "Not Sparkplug", "messages under spBv1.0/ that were not Sparkplug B (passed on unchanged)"],
      ["held_back", "Held back", "stale messages of an earlier edge node session kept from subscribers"],
      ["untracked", "Untracked", "messages of edge nodes past sparkplug.max_edge_nodes"],
      ["certificates_published", "Certificates published", "births republished under $sparkplug/certificates/"],
      ["rebirths_requested", "Rebirths requested", "rebirth commands sent from this page or the API"],
    ].flatMap(([k, label, title]) => [h("dt", { title }, label), h("dd", { data: { key: k } }, fmtInt(sp[k]))]));
  }

  // rebirth asks the gateway to send an edge node a rebirth command and
  // shows the outcome in the node's row: "rebirth sent", or the answer's
  // error (a gateway without a login refuses: nobody to trust with it).
  async function rebirth(group, edgeNode) {
    const key = edgeKey(group, edgeNode);
    ui.rebirths.set(key, { pending: true, text: "sending…" });
    renderSparkplug(ui.sparkplug);
    let out;
    try {
      const r = await postJSON("api/v1/sparkplug/rebirth", { group, edge_node: edgeNode });
      out = r.ok ? { ok: true, text: "rebirth sent", title: r.data && r.data.sent ? "sent on " + r.data.sent : "" }
        : { ok: false, text: (r.data && r.data.error) || "the gateway answered HTTP " + r.status };
    } catch (_) {
      out = { ok: false, text: "no answer from the gateway" };
    }
    out.title = (out.title ? out.title + " · " : "") + "at " + new Date().toLocaleTimeString();
    ui.rebirths.set(key, out);
    renderSparkplug(ui.sparkplug);
  }

  // --- chart ---
  const cssVars = {};
  function cssVar(name) { // read once: getComputedStyle is not free
    if (!(name in cssVars)) cssVars[name] = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return cssVars[name];
  }
  function niceMax(v) {
    if (v <= 1) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }
  let chartDrawn = "", chartSize = null;
  function drawChart(hist, interval, force) {
    const c = $("chart");
    // At most one pixel per CSS pixel: a rate chart needs no more, and a
    // high-DPI canvas costs several times the raster work.
    const dpr = Math.min(1, window.devicePixelRatio || 1);
    if (force || !chartSize) chartSize = [c.clientWidth, c.clientHeight]; // layout read only on resize
    const [w, ht] = chartSize;
    if (!w || !ht) return;
    const n = hist.messages_in.length;
    const stamp = w + "x" + ht + ":" + n + ":" + hist.messages_in[n - 1] + ":" + hist.messages_out[n - 1];
    if (stamp === chartDrawn) return; // nothing new to draw
    chartDrawn = stamp;
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
    setText($("groups-count"), groups.length + (groups.length === 1 ? " group" : " groups") +
      (degraded ? " · " + degraded + " degraded" : ""));
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
        title: deg ? g.reasons.join("\n") : "",
        data: { group: g.name, filter: g.filter, state: g.state, key: k, open: open ? "1" : "" },
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
    patchChildren(body, rows);
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
    ui.clientsTimer = null;
    if (document.hidden || ui.refused) return; // resumed by the visibilitychange handler
    const after = ui.pages[ui.pages.length - 1];
    const q = new URLSearchParams({ limit: CLIENTS_PAGE });
    if (ui.search) q.set("q", ui.search);
    if (after) q.set("after", after);
    try {
      renderClients(await getJSON("api/v1/clients?" + q));
    } catch (e) {
      // The status poll shows the connection state, but a refused login
      // stops both polls, whichever saw it first.
      if (refusedLogin(e)) {
        ui.refused = true;
        setLive(false, e);
        return;
      }
    }
    ui.clientsTimer = setTimeout(loadClients, CLIENTS_MS);
  }

  function renderClients(data) {
    setText($("clients-count"), ui.search
      ? fmtInt(data.total) + " matching"
      : fmtInt(data.total) + (data.total === 1 ? " session" : " sessions"));
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
    patchChildren($("clients-body"), rows);
    const next = $("clients-next"), first = $("clients-first");
    if (next.disabled !== !data.next) next.disabled = !data.next;
    if (next.dataset.next !== (data.next || "")) next.dataset.next = data.next || "";
    if (first.disabled !== ui.pages.length <= 1) first.disabled = ui.pages.length <= 1;
  }

  // --- the poll ---
  let lastGroups = [];
  // setLive marks the live dot (no animation: one would repaint the page
  // sixty times a second) and says when the last update came; on a failed
  // poll the banner says why (err: what getJSON threw). The banner is set
  // on every call, not only when the dot changes: before the first answer
  // the dot is neither on nor stale, and a page whose very first poll
  // fails (a refused login) must say so rather than stay on "…".
  function setLive(ok, err) {
    const l = $("live"), b = $("banner");
    if (l.classList.contains("on") !== ok) {
      l.classList.toggle("on", ok);
      l.classList.toggle("stale", !ok);
    }
    if (b.classList.contains("hidden") !== ok) b.classList.toggle("hidden", ok);
    if (ok) {
      l.title = "updated " + new Date().toLocaleTimeString();
      return;
    }
    const status = err && err.status;
    const text = status === 401 ? "Login failed (HTTP 401): the gateway refused the user name and password. Reload the page and log in with a user of the gateway's password file."
      : status === 403 ? "Login failed (HTTP 403): this user may not see the status page (http.users). Reload the page and log in as another user."
      : status === 429 ? "Too many failed logins from this address (HTTP 429): wait a while, then reload the page."
      : status ? "The gateway answered HTTP " + status + ": the figures below are stale."
      : "No answer from the gateway: the figures below are stale.";
    setText(b, text);
    l.title = text;
  }

  let pollTimer = null, polling = false;
  async function poll() {
    clearTimeout(pollTimer);
    pollTimer = null;
    if (document.hidden || polling || ui.refused) return; // resumed by the visibilitychange handler
    polling = true;
    try {
      // With the Sparkplug awareness off, api/v1/sparkplug is asked only
      // every SPARKPLUG_OFF_POLLS polls: most gateways have none.
      const [st, gr, sp] = await Promise.all([getJSON("api/v1/status"), getJSON("api/v1/groups"),
        ui.sparkplugWait > 0 ? null : getJSON("api/v1/sparkplug")]);
      renderStatus(st);
      lastGroups = gr.groups;
      renderGroups(lastGroups);
      if (sp) {
        ui.sparkplugWait = sp.enabled ? 0 : SPARKPLUG_OFF_POLLS;
        renderSparkplug(sp);
      } else {
        ui.sparkplugWait--;
      }
      setLive(true);
    } catch (e) {
      if (refusedLogin(e)) ui.refused = true;
      setLive(false, e);
    }
    polling = false;
    if (ui.refused) return;
    if (!document.hidden) pollTimer = setTimeout(poll, POLL_MS);
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
    $("groups-body").addEventListener("click", (e) => {
      const row = e.target.closest("tr.group");
      if (!row) return;
      ui.expanded.set(row.dataset.key, !row.dataset.open);
      renderGroups(lastGroups);
    });
    $("sparkplug-body").addEventListener("click", (e) => {
      const b = e.target.closest("button.rebirth");
      if (!b || b.disabled) return;
      rebirth(b.dataset.group, b.dataset.edgeNode);
    });
    // A hidden tab fetches and draws nothing; it catches up when shown.
    document.addEventListener("visibilitychange", () => {
      if (document.hidden) return;
      if (!pollTimer) poll();
      if (!ui.clientsTimer) loadClients();
    });
    let resized = null;
    window.addEventListener("resize", () => {
      clearTimeout(resized);
      resized = setTimeout(() => ui.rates && drawChart(ui.rates.history, ui.rates.interval_seconds, true), 100);
    });
    poll();
    loadClients();
  }
  init();
})();
