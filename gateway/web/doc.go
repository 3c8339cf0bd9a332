// Package web serves the gateway's local status page, its JSON API, its
// Prometheus metrics, its health probes, and publishes the broker's $SYS
// topics. Everything it serves is read-only: no request changes the broker.
//
// # Endpoints
//
//	/                       status page (HTML, CSS and JS embedded; no external assets)
//	/api/v1/status          node, health, readiness, broker counters, rates and their history
//	/api/v1/clients         sessions, paginated (?limit, ?after, ?q)
//	/api/v1/clients/{id}    one session with its subscriptions
//	/api/v1/groups          share groups with their members and degraded reasons
//	/api/v1/groups/{name}   the groups of one name (one per filter)
//	/api/v1/storage         the store's figures, or {"configured": false}
//	/api/v1/cluster         the cluster panel, or {"configured": false}
//	/api/v1/hw              the hardware panel, or {"configured": false}
//	/api/v1/bridges         the uplink bridges: state, queue, rates, last error
//	/metrics                Prometheus text format, from a registry of its own
//	/healthz                200 while the process serves HTTP
//	/readyz                 200 when the gateway said it is ready and no health check failed
//
// docs/api.md documents every field.
//
// # Login
//
// With Options.Login everything but /healthz and /readyz asks for HTTP
// Basic credentials, checked by a [Verifier] (gateway/auth's
// Authenticator: the password file, its constant-time check and its
// throttle of failing addresses): 401 without or with wrong ones, 403 for
// a user outside Login.Users, 429 for an address throttled. A verified
// login is remembered for a minute, or until ForgetLogins.
//
// # Model
//
// Counters come from the broker at request time (broker.Server.Stats,
// ShareGroups, Clients), so the API and /metrics are exact at the moment
// they answer. What needs history comes from a sampler that runs every
// Options.SampleInterval: message rates and their last minutes for the
// charts, per-group and per-member delivery rates, how long a member's send
// window has been full, and each member's share of recent deliveries.
//
// A share group is degraded, and highlighted on the page, when any of
// these holds (thresholds in [Thresholds]):
//
//   - it has fewer members than its policy's min_members;
//   - its oldest queued message is older than QueueAge (the queue does not
//     drain);
//   - a member's send window (its Receive Maximum) has been full for
//     longer than WindowFull: a worker that stopped acknowledging;
//   - a member is offline while its session keeps its membership;
//   - with a strategy that spreads messages evenly (round_robin, random,
//     prefer_local), a member's share of the last ShareWindow's deliveries
//     is below its expected share by more than ShareTolerance (a slow or
//     starved worker; the members above their share are taking up its
//     slack and are not marked).
//
// # Label cardinality
//
// Per-group series carry the labels group and filter, per-member series
// group, filter and client. At most Options.MaxGroupSeries groups (default
// 100) and Options.MaxMemberSeries members (default 500) are exported,
// groups in name order; the rest are left out of /metrics (never out of the
// API) and counted by linemq_share_series_omitted. With the defaults a
// scrape holds at most 100*12 + 500*10 share series.
//
// The linemq_bridge_* series carry the label bridge, a name from the
// configuration (and state, of four fixed values): bounded by the bridges
// configured, none without.
//
// # $SYS
//
// With Options.SysInterval set, Start publishes $SYS/broker/... topics
// through broker.Server.Publish at that interval, as QoS 0 messages without
// the retain flag: retained ones would be written to the store each time,
// wearing the SD card for figures that are stale a moment later.
//
// # Lifecycle
//
// New builds the server; Start starts the sampler and the $SYS publisher;
// Serve serves HTTP on a listener; SetReady flips /readyz; Shutdown stops it
// all. A Server is also an http.Handler, for tests and embedding.
package web
