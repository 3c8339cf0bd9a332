// Package gateway is linemq's composition root: it turns a validated
// configuration into running parts (the data directory, the broker, its
// listeners) and stops them in reverse order.
//
// A daemon calls [Run], which returns when its context is cancelled and the
// gateway has shut down. Tests and embedders call [Start] and get a
// [*Gateway] handle instead:
//
//	cfg := config.Default()
//	cfg.MQTT.Listen = new("127.0.0.1:0")
//	g, err := gateway.Start(ctx, gateway.Options{Config: cfg})
//	if err != nil { ... }
//	defer g.Close()
//	addr := g.MQTTAddr() // the port the kernel chose
//
// # Shutdown
//
// Close (and Run, on cancellation) stops accepting connections, sends every
// v5 client DISCONNECT 0x8B Server shutting down, and waits up to
// [ShutdownTimeout] for connections to end before cutting the rest, so a
// process stops within the 5 seconds a service manager is typically given
// (and a systemd TimeoutStopSec= of 5s holds).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/gateway/bridge"
	"github.com/linemq/linemq/gateway/cluster"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/gateway/listen"
	"github.com/linemq/linemq/gateway/provision"
	"github.com/linemq/linemq/gateway/sparkplug"
	"github.com/linemq/linemq/gateway/web"
	"github.com/linemq/linemq/hw"
	"github.com/linemq/linemq/hw/led"
	"github.com/linemq/linemq/storage/bolt"
)

// DBFile is the name of the persistence file inside the data directory.
const DBFile = "linemq.db"

// ShutdownTimeout bounds how long Close waits for clients to go after being
// told the server is shutting down; the rest are then disconnected.
const ShutdownTimeout = 4 * time.Second

// Options are what Start and Run need. The zero value runs a standalone
// gateway with the default configuration and no logs.
type Options struct {
	// Config is the configuration; nil means config.Default(). Start
	// validates it. It is read once; later changes have no effect.
	Config *config.Config
	// Logger receives the gateway's and the broker's logs; nil discards
	// them.
	Logger *slog.Logger
	// Version is the release, shown on the status page and in $SYS.
	Version string
	// HW overrides how the hardware is opened (a simulated board, a fake
	// environment), for tests; the zero value is the real machine.
	HW hw.Options
	// Provisioned is the outcome of the last provisioning set applied or
	// refused (gateway/provision), nil when there was none: a refused one
	// makes the "provisioning" health check degraded, naming why, on the
	// page, in /readyz's details and on the status LED.
	Provisioned *provision.Status
	// Update is the daemon's update slots, for the page and uploads.
	Update UpdateOptions
}

// Gateway is a running gateway, made by Start. Its methods may be called
// concurrently.
type Gateway struct {
	cfg     *config.Config // with defaults filled in
	log     *slog.Logger
	srv     *broker.Server
	store   *bolt.Store
	health  *health.Registry
	cluster *cluster.Cluster // nil when standalone

	sparkplug *sparkplug.Tracker // nil when sparkplug.aware is false
	hw        *hw.Hardware
	web       *web.Server  // nil when http.listen is empty
	mqtt      net.Listener // the mqtt.listen shortcut; nil when disabled
	extra     []*listen.Listener
	auth      *auth.Authenticator
	http      net.Listener // nil when disabled
	bridges   []*bridge.Bridge
	upd       *updater // nil without Options.Update
	started   time.Time

	serving sync.WaitGroup // one per Serve goroutine
	ready   chan struct{}  // closed once the gateway serves MQTT

	hwStop chan struct{}  // closed to stop driving the LEDs
	hwDone sync.WaitGroup // the goroutines driving them

	trimStop chan struct{} // closed to stop trimMemory
	trimDone chan struct{} // closed when trimMemory has returned

	stopOnce sync.Once
	stopped  chan struct{} // closed once stop has finished
	err      error         // why the gateway stopped, if not Close; set before stopped closes
}

// Start validates the configuration, creates the data directory, builds the
// broker and starts serving its listeners. ctx bounds the start only;
// cancelling it later does not stop the gateway (call Close). If a step
// fails, what the earlier steps opened is closed again before Start
// returns the error.
func Start(ctx context.Context, opts Options) (_ *Gateway, err error) {
	cfg := opts.Config
	if cfg == nil {
		cfg = config.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}

	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("gateway: data directory: %w", err)
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		dataDir = cfg.DataDir // only used in a log line
	}

	store, err := bolt.Open(filepath.Join(cfg.DataDir, DBFile), &bolt.Options{
		Sync:          bolt.SyncMode(cfg.Storage.Sync),
		BatchInterval: time.Duration(cfg.Storage.BatchInterval),
		MaxSize:       max(int64(cfg.Storage.MaxSize), 0), // Unlimited: no bound
		Logger:        log.With("component", "storage"),
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	tracker := web.NewTracker()
	authn, err := auth.New(cfg.Auth, auth.Options{Logger: log.With("component", "auth")})
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	healthReg := health.New(health.Options{Logger: log.With("component", "health")})
	var cl *cluster.Cluster
	if cfg.Cluster.Listen != "" {
		if cl, err = startCluster(ctx, cfg, dataDir, store.ID(), opts.Version, log); err != nil {
			healthReg.Close()
			store.Close()
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	// The Sparkplug tracker publishes through the broker, which is made
	// with the tracker as its Observer: it learns the broker from here,
	// before any message can reach it.
	var srvRef atomic.Pointer[broker.Server]
	bo := cfg.BrokerOptions()
	bo.Auth = authn
	if len(cfg.Bridges) > 0 {
		bo.Auth = bridge.Trusted(authn) // the bridges' in-process clients
	}
	if cl != nil {
		bo.Cluster = cl.Hooks()
	}
	bo.Logger = log.With("component", "broker")
	bo.Store = store
	if cl != nil {
		bo.Store = cl.Store(store) // with replicas: writes go to them too
	}
	bo.Events = tracker
	var spark *sparkplug.Tracker
	if *cfg.Sparkplug.Aware {
		if spark, err = newSparkplug(cfg, cl, &srvRef, log); err != nil {
			if cl != nil {
				cl.Close()
			}
			healthReg.Close()
			store.Close()
			return nil, fmt.Errorf("gateway: %w", err)
		}
		bo.Observer = spark
		bo.ReservedTopics = []string{sparkplug.ReservedPrefix}
	}
	srv, err := broker.New(bo)
	if err != nil {
		if cl != nil {
			cl.Close()
		}
		healthReg.Close()
		store.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	srvRef.Store(srv)
	g := &Gateway{
		cfg: cfg, log: log, srv: srv, store: store, started: time.Now(), auth: authn,
		health: healthReg, cluster: cl, sparkplug: spark,
		ready:   make(chan struct{}),
		stopped: make(chan struct{}), trimStop: make(chan struct{}), hwStop: make(chan struct{}),
	}
	if opts.Update.Slots != nil {
		g.upd = newUpdater(opts.Update, cfg.Update.KeysDir, cfg.Update.Admins, time.Duration(cfg.Update.Trial), opts.Version, cl, log.With("component", "update"))
	}
	defer func() {
		if err != nil {
			// Unwind through stop, the one path that closes everything,
			// once: a listener already serving (they serve before a
			// cluster is ready) that sees its socket closed calls it too.
			g.stop(err)
		}
	}()

	if g.hw, err = hw.Open(cfg.HW, g.hwOptions(opts.HW)); err != nil {
		return nil, fmt.Errorf("gateway: hw.%w", err)
	}
	if addr := *cfg.MQTT.Listen; addr != "" {
		var lc net.ListenConfig
		if g.mqtt, err = lc.Listen(ctx, "tcp", addr); err != nil {
			return nil, fmt.Errorf("gateway: mqtt listener: %w", err)
		}
	} else if len(cfg.Listeners) == 0 {
		log.Warn("MQTT listener disabled (mqtt.listen is empty and no listeners are configured)")
	}
	if g.extra, err = listen.Open(ctx, cfg.Listeners, listen.Options{Logger: log.With("component", "listen")}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if addr := *cfg.HTTP.Listen; addr != "" {
		var lc net.ListenConfig
		if g.http, err = lc.Listen(ctx, "tcp", addr); err != nil {
			return nil, fmt.Errorf("gateway: http listener: %w", err)
		}
		if g.web, err = g.newWeb(tracker, opts.Version); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("gateway: start: %w", err)
	}
	if err = g.startHealth(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.cluster != nil {
		// Bound before the listeners serve: a CONNECT is claimed through it.
		if err = g.cluster.Bind(srv); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	if p := opts.Provisioned; p != nil {
		st, why := provisionState(p)
		g.health.Set("provisioning", st, why)
	}
	// The listeners serve from now on; in a cluster, a CONNECT before
	// this node knows the others waits for that (up to the claim bound)
	// and is then refused with 0x88, never left unanswered.
	if g.mqtt != nil {
		g.serve("mqtt", g.mqtt)
		g.health.Set("listener.mqtt", health.OK, "accepting on "+g.mqtt.Addr().String())
	}
	for _, l := range g.extra {
		name := fmt.Sprintf("%s.%s", l.Type(), l.Addr())
		g.serve(string(l.Type()), l)
		g.health.Set("listener."+name, health.OK, "accepting on "+l.URL())
	}
	if g.cluster != nil {
		select {
		case <-g.cluster.Ready():
		case <-ctx.Done():
			return nil, fmt.Errorf("gateway: cluster: registry not ready: %w", ctx.Err())
		}
		// Polled from now on (the first answer at once): before Ready
		// the page says not ready.
		if err = clusterChecks(g.cluster, g.health); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	if g.web != nil {
		g.web.Start()
		g.serveHTTP()
	}
	if err = g.startBridges(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.trimDone = make(chan struct{})
	go g.trimMemory()
	g.driveLEDs()

	// Ready: the store is restored (broker.New did it), a cluster's
	// registry is loaded, and the listeners accept.
	if g.web != nil {
		g.web.SetReady(true)
	}
	if err := g.hw.Watchdog.Ready(); err != nil {
		log.Warn("telling systemd the gateway is ready failed", "err", err)
	}
	close(g.ready)
	if g.upd != nil {
		g.upd.bg.Go(g.upd.settleLine)
	}
	log.Info("gateway started", "node_id", cfg.NodeID, "data_dir", dataDir)
	return g, nil
}

// Ready returns a channel that is closed once the gateway serves: its
// storage is restored and its listeners accept. Start returns only after
// that today; the channel is what a caller should wait on, because a
// clustered gateway will become ready later than it starts.
func (g *Gateway) Ready() <-chan struct{} { return g.ready }

// Health returns the gateway's health registry.
func (g *Gateway) Health() *health.Registry { return g.health }

// Hardware returns the LEDs and watchdogs the gateway drives.
func (g *Gateway) Hardware() *hw.Hardware { return g.hw }

// Listeners returns the addresses of the MQTT listeners: mqtt.listen's
// first, then the configured ones.
func (g *Gateway) Listeners() []net.Addr {
	var as []net.Addr
	if g.mqtt != nil {
		as = append(as, g.mqtt.Addr())
	}
	for _, l := range g.extra {
		as = append(as, l.Addr())
	}
	return as
}

// ListenerURLs returns the listeners configured under listeners: (not the
// mqtt.listen shortcut), in the configuration's order, each as a client
// would write it ("mqtt://host:port", "mqtts://host:port",
// "ws://host:port/mqtt"): the scheme tells the transport, which an address
// alone does not.
func (g *Gateway) ListenerURLs() []string {
	us := make([]string, 0, len(g.extra))
	for _, l := range g.extra {
		us = append(us, l.URL())
	}
	return us
}

// HTTPAddr returns the address the status page listens on, or nil when it
// is disabled.
func (g *Gateway) HTTPAddr() net.Addr {
	if g.http == nil {
		return nil
	}
	return g.http.Addr()
}

// startHealth registers the gateway's health checks: the broker's liveness
// probe, the storage's commits, and share groups below their minimum.
func (g *Gateway) startHealth() error {
	every, within := time.Duration(g.cfg.Health.ProbeInterval), time.Duration(g.cfg.Health.ProbeTimeout)
	return errors.Join(
		g.health.Poll("broker", every, within, g.srv.Probe),
		g.health.Poll("storage", every, within, func(ctx context.Context) error {
			if st := g.store.Stats(); st.Failing {
				return fmt.Errorf("commits failing: %v", st.LastCommitError)
			}
			// A disk that hangs (a dying SD card) shows here as no answer.
			return g.store.Sync(ctx)
		}),
		// A group the page shows degraded (a member offline, its window
		// full for long, shares far from even, a queue not draining, fewer
		// members than min_members) makes the check degraded: the gateway
		// still serves (ready, its watchdog fed), and the badge, /readyz's
		// checks and the group table say the same. Without the page, the
		// broker's own rule (min_members) is all there is.
		g.health.Poll("share_groups", every, within, func(context.Context) error {
			var degraded []string
			if g.web != nil {
				degraded = g.web.DegradedGroups()
			} else {
				for _, gs := range g.srv.ShareGroups() {
					if gs.Degraded {
						degraded = append(degraded, fmt.Sprintf("%s: %d members, below min_members %d", gs.Name, gs.Members, gs.MinMembers))
					}
				}
			}
			if len(degraded) > 0 {
				return health.Degrade(fmt.Errorf("degraded: %s", strings.Join(degraded, " | ")))
			}
			return nil
		}),
	)
}

// hwOptions completes the hardware options: the health registry is the
// watchdog's gate, so it is fed only while every check passes.
func (g *Gateway) hwOptions(o hw.Options) hw.Options {
	o.Gate = g.health
	if o.Logger == nil {
		o.Logger = g.log.With("component", "hw")
	}
	return o
}

// driveLEDs shows the overall health on the status LED and the message
// rate on the traffic LED, and on the cluster LED whether the cluster is
// whole (on) or not (slow blink: etcd out of step, a gateway missing);
// off when standalone.
func (g *Gateway) driveLEDs() {
	h := g.hw
	h.Cluster.Set(led.Off) // until the first show, and for good when standalone
	changes, unsubscribe := g.health.Subscribe(16)
	show := func(s health.State) {
		if g.cluster != nil {
			if c, ok := g.health.Get("cluster"); ok && c.State == health.OK {
				h.Cluster.Set(led.On)
			} else {
				h.Cluster.Set(led.SlowBlink)
			}
		}
		switch s {
		case health.OK:
			h.Status.Set(led.Heartbeat)
		case health.Degraded:
			h.Status.Set(led.SlowBlink)
		default:
			h.Status.Set(led.FastBlink)
		}
	}
	show(g.health.Overall())
	g.hwDone.Add(1)
	go func() {
		defer g.hwDone.Done()
		defer unsubscribe()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		last := g.srv.Stats().MessagesIn
		for {
			select {
			case <-g.hwStop:
				return
			case c := <-changes:
				show(c.Overall)
			case <-t.C:
				in := g.srv.Stats().MessagesIn
				h.Traffic.Count(in - last)
				last = in
			}
		}
	}()
}

// newWeb makes the status page server.
func (g *Gateway) newWeb(tracker *web.Tracker, version string) (*web.Server, error) {
	sys := time.Duration(0)
	if g.cfg.MQTT.SysInterval != nil {
		sys = time.Duration(*g.cfg.MQTT.SysInterval)
	}
	var login *web.Login
	if g.cfg.HTTPLoginRequired() {
		login = &web.Login{Verifier: g.auth, Users: g.cfg.HTTP.Users, Admins: g.cfg.Update.Admins}
	}
	var upd web.Updater
	if g.upd != nil {
		upd = g.upd
	}
	return web.New(web.Options{
		Update:  upd,
		Login:   login,
		Broker:  g.srv,
		Health:  g.health,
		Tracker: tracker,
		NodeID:  g.cfg.NodeID,
		Version: version,
		Started: g.started,
		Listeners: func() []web.Listener {
			var ls []web.Listener
			if g.mqtt != nil {
				ls = append(ls, web.Listener{Proto: "mqtt", Addr: g.mqtt.Addr().String()})
			}
			for _, l := range g.extra {
				ls = append(ls, web.Listener{Proto: string(l.Type()), Addr: l.Addr().String()})
			}
			if g.http != nil {
				ls = append(ls, web.Listener{Proto: "http", Addr: g.http.Addr().String()})
			}
			return ls
		},
		Storage: func() web.StorageStats {
			st := g.store.Stats()
			ss := web.StorageStats{
				Path: g.store.Path(), SyncMode: g.cfg.Storage.Sync.String(), FileSize: st.FileSize,
				BytesWritten: st.BytesWritten, PageBytesWritten: st.PageBytesWritten, Commits: st.Commits,
				CommitErrors: st.CommitErrors, PendingOps: st.PendingOps, Failing: st.Failing,
			}
			if st.LastCommitError != nil {
				ss.LastError = st.LastCommitError.Error()
			}
			return ss
		},
		Hardware:            g.hwStatus(),
		Cluster:             g.clusterStatus(),
		ClusterStats:        g.clusterMetrics(),
		SysInterval:         sys,
		Logger:              g.log.With("component", "web"),
		Sparkplug:           g.sparkplug,
		SparkplugEdgeSeries: int(*g.cfg.Sparkplug.MetricsEdgeNodes),
		Bridges: func() []web.BridgeStats {
			// g.bridges is complete, and no longer written, once the
			// gateway is ready: the page serves before the bridges start.
			select {
			case <-g.ready:
			default:
				return nil
			}
			var out []web.BridgeStats
			for _, s := range g.Bridges() {
				out = append(out, web.BridgeStats{
					Name: s.Name, State: string(s.State), Since: s.Since, Remote: s.Remote, Protocol: s.Version,
					Queued: s.Queued, QueuedBytes: s.QueuedBytes, OldestQueued: s.OldestAge, InFlight: s.Inflight,
					Sent: s.Sent, Received: s.Received, Enqueued: s.Enqueued, Dropped: s.Dropped, Expired: s.Expired,
					Rejected: s.Rejected, DroppedQoS0: s.DroppedQoS0, Loops: s.Loops, Retries: s.Retries,
					SentRate: s.SentRate, ReceivedRate: s.ReceivedRate, LastError: s.LastError, LastErrorAt: s.LastErrorAt,
				})
			}
			return out
		},
	})
}

// hwStatus is the hardware panel of the status page, nil when there is
// no hardware (the page then says "not configured").
func (g *Gateway) hwStatus() func() any {
	if !g.hw.Configured() {
		return nil
	}
	return func() any { return hwJSONOf(g.hw) }
}

// serveHTTP runs the status page on the HTTP listener. Like an MQTT
// listener, one that fails stops the gateway.
func (g *Gateway) serveHTTP() {
	g.log.Info("listening", "proto", "http", "addr", g.http.Addr().String())
	g.serving.Add(1)
	go func() {
		defer g.serving.Done()
		err := g.web.Serve(g.http)
		if err == nil || errors.Is(err, http.ErrServerClosed) {
			return
		}
		err = fmt.Errorf("gateway: http listener %s: %w", g.http.Addr(), err)
		g.log.Error("listener failed; shutting down", "proto", "http", "err", err)
		go g.stop(err)
	}()
}

// serve runs the broker on l in a goroutine. A listener that fails while
// the gateway runs stops the whole gateway: a broker that silently stopped
// accepting clients would look healthy to its supervisor.
func (g *Gateway) serve(proto string, l net.Listener) {
	g.log.Info("listening", "proto", proto, "addr", l.Addr().String())
	g.serving.Add(1)
	go func() {
		defer g.serving.Done()
		err := g.srv.Serve(l)
		if errors.Is(err, broker.ErrServerClosed) {
			return
		}
		err = fmt.Errorf("gateway: %s listener %s: %w", proto, l.Addr(), err)
		g.health.Set("listener."+proto, health.Failed, err.Error())
		g.log.Error("listener failed; shutting down", "proto", proto, "err", err)
		// stop waits for this goroutine, so it cannot run on it.
		go g.stop(err)
	}()
}

// MQTTAddr returns the address the MQTT listener is bound to (with the
// actual port when the configuration asked for port 0), or nil when the
// listener is disabled.
func (g *Gateway) MQTTAddr() net.Addr {
	if g.mqtt == nil {
		return nil
	}
	return g.mqtt.Addr()
}

// Broker returns the broker the gateway runs.
func (g *Gateway) Broker() *broker.Server { return g.srv }

// Wait blocks until the gateway has stopped, because Close was called or
// because a part of it failed (it then shuts itself down), and returns the
// failure, or nil after Close.
func (g *Gateway) Wait() error {
	<-g.stopped
	return g.err
}

// Done returns a channel that is closed once the gateway has stopped; Wait
// then returns at once.
func (g *Gateway) Done() <-chan struct{} { return g.stopped }

// Close shuts the gateway down gracefully, waiting at most ShutdownTimeout
// for clients, and returns what Wait returns. It is safe to call more than
// once, and concurrently.
func (g *Gateway) Close() error {
	g.stop(nil)
	return g.Wait()
}

// stop shuts everything down once, in the reverse order of Start; cause is
// why (nil for Close).
func (g *Gateway) stop(cause error) {
	g.stopOnce.Do(func() {
		start := time.Now()
		if g.upd != nil {
			g.upd.stop() // a wait for the line's update lock
		}
		ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		if g.web != nil {
			g.web.SetReady(false) // load balancers and operators see it first
		}
		close(g.trimStop)
		if g.trimDone != nil {
			<-g.trimDone
		}
		// STOPPING=1 and the watchdogs' magic close: a clean shutdown must
		// not end in a watchdog reset.
		close(g.hwStop)
		g.hwDone.Wait()
		if g.hw != nil { // nil when Start failed before opening it
			if err := g.hw.Close(); err != nil {
				g.log.Warn("closing the hardware", "err", err)
			}
		}
		if g.web != nil {
			g.web.Shutdown(ctx)
		}
		g.closeBridges() // before the broker and the store they use
		err := g.srv.Shutdown(ctx)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			// The process still stops in time, as it was asked to; the
			// clients that did not go were cut off.
			g.log.Warn("shutdown deadline passed; remaining connections closed", "timeout", ShutdownTimeout)
		case err != nil && !errors.Is(err, broker.ErrServerClosed):
			g.log.Error("broker shutdown", "err", err)
		}
		// Shutdown closes the listeners it serves; a listener whose Serve
		// already failed is no longer among them.
		g.closeListeners()
		g.serving.Wait()
		g.health.Close()
		if g.cluster != nil {
			// After the broker: its shutdown releases sessions and
			// subscriptions through the registry.
			if err := g.cluster.Close(); err != nil {
				g.log.Warn("leaving the cluster", "err", err)
			}
		}
		// The store goes last: the broker's shutdown (wills, session
		// records) writes to it.
		if err := g.store.Close(); err != nil {
			g.log.Error("closing the store lost writes", "err", err)
			if cause == nil {
				cause = fmt.Errorf("gateway: closing the store: %w", err)
			}
		}
		g.err = cause
		st := g.Stats()
		g.log.Info("gateway stopped", "took", time.Since(start).Round(time.Millisecond),
			"messages_in", st.Broker.MessagesIn, "disk_bytes", st.Store.PageBytesWritten,
			"disk_bytes_per_message", int(st.DiskBytesPerMessage))
		close(g.stopped)
	})
}

func (g *Gateway) closeListeners() {
	for _, l := range []net.Listener{g.mqtt, g.http} {
		if l != nil {
			l.Close() // errors: already closed by Shutdown, which is fine
		}
	}
	for _, l := range g.extra {
		l.Close()
	}
}

// provisionState is the health of the last provisioning set: OK once
// applied, degraded while the last one offered was refused (the gateway
// runs on the configuration before it).
func provisionState(p *provision.Status) (health.State, string) {
	at := p.At.Format("2006-01-02 15:04 UTC")
	if p.Applied {
		return health.OK, fmt.Sprintf("the set of %s was applied (%d files)", at, len(p.Files))
	}
	why := "no reason recorded"
	if len(p.Problems) > 0 {
		why = p.Problems[0]
		if n := len(p.Problems) - 1; n > 0 {
			why += fmt.Sprintf(" (and %d more)", n)
		}
	}
	return health.Degraded, fmt.Sprintf("the set of %s was refused, the configuration before it runs: %s; see linemq-error.txt on the boot partition", at, why)
}

// Reload reads the password and ACL files, the listeners' certificates and
// the mesh's again (on SIGHUP), for MQTT and the status page's login alike. Connected
// clients stay; a file that no longer reads leaves the previous one in
// force and is reported.
func (g *Gateway) Reload() error {
	errs := []error{g.auth.Reload()}
	if g.web != nil {
		g.web.ForgetLogins() // the status page's logins are checked again
	}
	for _, l := range g.extra {
		errs = append(errs, l.Reload())
	}
	if g.cluster != nil {
		errs = append(errs, g.cluster.ReloadTLS())
	}
	return errors.Join(errs...)
}

// Run starts the gateway, keeps it running until ctx is cancelled or a
// part of it fails, and shuts it down. It returns nil after a clean
// shutdown on cancellation, or the error that kept it from starting or
// made it stop.
func Run(ctx context.Context, opts Options) error {
	g, err := Start(ctx, opts)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		g.log.Info("shutting down", "cause", context.Cause(ctx))
	case <-g.Done():
	}
	return g.Close()
}

// Stats is a snapshot of the gateway's parts, for the status page and logs.
type Stats struct {
	Broker broker.Stats
	Store  bolt.Stats
	// DiskBytesPerMessage is the flash-wear figure: bytes the store wrote to
	// its file (whole pages, as the card sees them) per message that reached
	// its publisher's acknowledgement (MessagesIn); 0 before any message.
	DiskBytesPerMessage float64
}

// Stats returns a snapshot of the broker's and the store's counters.
func (g *Gateway) Stats() Stats {
	s := Stats{Broker: g.srv.Stats(), Store: g.store.Stats()}
	if s.Broker.MessagesIn > 0 {
		s.DiskBytesPerMessage = float64(s.Store.PageBytesWritten) / float64(s.Broker.MessagesIn)
	}
	return s
}

// trimInterval and trimThreshold: after a wave of clients connected (and
// then went idle and were parked) or left, the memory their goroutine
// stacks and buffers used is free inside the Go runtime but still counted
// in the process's RSS; the runtime gives it back to the OS only slowly. On
// a gateway with a few hundred MiB that matters, so the gateway hands it
// back at once when the number of parked or connected clients changed by
// at least trimThreshold since the last look.
const (
	trimInterval  = 5 * time.Second
	trimThreshold = 500
)

func (g *Gateway) trimMemory() {
	defer close(g.trimDone)
	t := time.NewTicker(trimInterval)
	defer t.Stop()
	var lastParked int
	var lastConnected int64
	for {
		select {
		case <-g.trimStop:
			return
		case <-t.C:
		}
		st := g.srv.Stats()
		dp, dc := st.ClientsParked-lastParked, st.ClientsConnected-lastConnected
		if dp >= trimThreshold || -dp >= trimThreshold || dc >= trimThreshold || -dc >= trimThreshold {
			debug.FreeOSMemory()
			lastParked, lastConnected = st.ClientsParked, st.ClientsConnected
		}
	}
}

// startBridges starts the configured uplink bridges (gateway/bridge), each
// with a health check that is degraded while its link is down.
func (g *Gateway) startBridges() error {
	every, within := time.Duration(g.cfg.Health.ProbeInterval), time.Duration(g.cfg.Health.ProbeTimeout)
	for _, bc := range g.cfg.Bridges {
		b, err := bridge.New(bridge.Options{
			Config: bc, NodeID: g.cfg.NodeID, Broker: g.srv, Store: g.store,
			Logger: g.log.With("component", "bridge"),
		})
		if err == nil {
			err = b.Start()
		}
		if err != nil {
			return err
		}
		g.bridges = append(g.bridges, b)
		if err := g.health.Poll("bridge."+b.Name(), every, within, b.Check); err != nil {
			return err
		}
	}
	return nil
}

func (g *Gateway) closeBridges() {
	for _, b := range g.bridges {
		b.Close()
	}
}

// Bridges returns a snapshot of every uplink bridge (state, queue depth,
// oldest queued age, rates, last error), for the status page and metrics.
func (g *Gateway) Bridges() []bridge.Stats {
	var out []bridge.Stats
	for _, b := range g.bridges {
		out = append(out, b.Stats())
	}
	return out
}
