package web

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/gateway/sparkplug"
)

// Options configure a Server. Broker is required; the zero value of every
// other field means its default (or "not configured" for the panels).
type Options struct {
	// Broker is the broker whose state is shown.
	Broker *broker.Server
	// Health is the gateway's health registry, shown on the page and
	// behind /readyz; nil shows no checks.
	Health *health.Registry
	// Tracker records connection times and disconnect reasons; it must be
	// the broker's Options.Events (or be called from it). Nil leaves
	// connected_since empty and the disconnect counters out.
	Tracker *Tracker

	// NodeID and Version name this gateway on the page, in the API, in
	// $SYS/broker/version and in linemq_build_info.
	NodeID  string
	Version string
	// Started is when the gateway started, for uptime; zero means when
	// New ran.
	Started time.Time
	// Listeners returns the gateway's listeners, for the page; nil shows
	// none.
	Listeners func() []Listener

	// Storage returns the store's figures; nil shows the storage panel as
	// not configured (a memory-only broker).
	Storage func() StorageStats
	// Cluster and Hardware return the cluster and hardware panels, any
	// value that encodes to a JSON object; nil shows them as not
	// configured. They exist so that those parts fill their panels in
	// without changes here: the page renders any object as a list.
	Cluster  func() any
	Hardware func() any
	// ClusterStats returns the registry's and the peer streams' figures
	// for /metrics (the linemq_cluster_* families); nil on a standalone
	// gateway, which then exports none of them.
	ClusterStats func() ClusterStats
	// Bridges returns the uplink bridges' figures (gateway/bridge), for
	// the bridges panel, /api/v1/bridges and the linemq_bridge_* families;
	// nil or an empty list when no bridge is configured: the panel is then
	// hidden and no bridge series are exported.
	Bridges func() []BridgeStats

	// Sparkplug is the gateway's Sparkplug B tracker, for the Sparkplug
	// panel, /api/v1/sparkplug, the linemq_sparkplug_* families and
	// $SYS/broker/sparkplug/; nil when the awareness is off.
	Sparkplug *sparkplug.Tracker
	// SparkplugEdgeSeries bounds the edge nodes with series of their own
	// in /metrics (sparkplug.metrics_edge_nodes); 0 exports none.
	SparkplugEdgeSeries int

	// Login, when set, makes everything but /healthz and /readyz ask for
	// a login (HTTP Basic authentication); nil serves everyone.
	Login *Login

	// Update is the gateway's update slots, for the update panel and
	// /api/v1/update (uploads by Login.Admins); nil when this process
	// does not manage them (an embedded gateway, tests).
	Update Updater
	// MaxUpload bounds an uploaded bundle; 0 is DefaultMaxUpload.
	MaxUpload int64

	// SysInterval is how often $SYS/broker/... is published; 0 disables
	// it.
	SysInterval time.Duration
	// SampleInterval is how often rates, windows and shares are sampled.
	// Default 1 s.
	SampleInterval time.Duration
	// Degraded holds the thresholds of the share-group highlights.
	Degraded Thresholds
	// MaxGroupSeries and MaxMemberSeries bound the per-group and
	// per-member series in /metrics (and the per-group $SYS topics).
	// Default 100 groups and 500 members; negative exports none.
	MaxGroupSeries  int
	MaxMemberSeries int

	// Clock is the time source for uptime, ages and the sampler's stamps;
	// nil uses the system clock. The sampler's ticks are real time.
	Clock broker.Clock
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
}

// Thresholds decide when a share group is shown degraded. A zero field
// takes its default; a negative one turns its rule off.
type Thresholds struct {
	// WindowFull: a member whose send window has been full this long.
	// Default 10 s.
	WindowFull time.Duration
	// QueueAge: a group whose oldest queued message is this old. Default
	// 30 s.
	QueueAge time.Duration
	// ShareWindow is the span over which members' shares of deliveries
	// are compared. Default 60 s.
	ShareWindow time.Duration
	// ShareTolerance is how far (relative to the expected share) a
	// member's share may fall short: 0.5 flags a member of three that got
	// less than 1/6 of the deliveries. Default 0.5.
	ShareTolerance float64
	// ShareMinMessages is how many deliveries the window needs before
	// shares are judged. Default 100.
	ShareMinMessages int
}

// Defaults of Options and Thresholds.
const (
	DefaultSampleInterval   = time.Second
	DefaultMaxGroupSeries   = 100
	DefaultMaxMemberSeries  = 500
	DefaultWindowFull       = 10 * time.Second
	DefaultQueueAge         = 30 * time.Second
	DefaultShareWindow      = time.Minute
	DefaultShareTolerance   = 0.5
	DefaultShareMinMessages = 100
	// HistoryLength is how many samples of the message rates the status
	// API returns for the charts: five minutes at the default interval.
	HistoryLength = 300
)

// Listener is one of the gateway's listeners, as the page shows it.
type Listener struct {
	Proto string `json:"proto"` // "mqtt", "mqtt+tls", "ws", "http"
	Addr  string `json:"addr"`
}

// StorageStats are the store's figures the storage panel shows. The
// gateway fills them from its store, so this package needs no storage
// import.
type StorageStats struct {
	Path             string `json:"path"`
	SyncMode         string `json:"sync_mode"`
	FileSize         int64  `json:"file_size_bytes"`
	BytesWritten     uint64 `json:"bytes_written"`      // key and value bytes committed
	PageBytesWritten uint64 `json:"page_bytes_written"` // what the file (the flash) saw
	Commits          uint64 `json:"commits"`
	CommitErrors     uint64 `json:"commit_errors"`
	PendingOps       int    `json:"pending_ops"`
	Failing          bool   `json:"failing"`
	LastError        string `json:"last_error,omitempty"`
}

// Server is the status page, API, metrics and $SYS publisher of one
// gateway. Make it with New.
type Server struct {
	opts    Options
	b       *broker.Server
	clock   broker.Clock
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *prometheus.Registry
	ready   atomic.Bool
	logins  *loginState // nil without Options.Login

	mu      sync.Mutex // guards the sampler's state below
	sampled samplerState

	startOnce sync.Once
	stopOnce  sync.Once
	stop      chan struct{}
	loops     sync.WaitGroup

	httpMu   sync.Mutex
	https    map[*http.Server]struct{}
	shutdown bool
}

// Errors of New.
var (
	ErrNoBroker   = errors.New("web: Options.Broker is required")
	ErrNoVerifier = errors.New("web: Options.Login needs a Verifier")
)

// New returns a server for opts. It starts nothing: call Start for the
// sampler and $SYS, and Serve (or use the Server as an http.Handler).
func New(opts Options) (*Server, error) {
	if opts.Broker == nil {
		return nil, ErrNoBroker
	}
	if opts.Login != nil && opts.Login.Verifier == nil {
		return nil, ErrNoVerifier
	}
	o := opts.withDefaults()
	s := &Server{
		opts:  o,
		b:     o.Broker,
		clock: o.Clock,
		log:   o.Logger,
		stop:  make(chan struct{}),
		https: make(map[*http.Server]struct{}),
	}
	s.sampled.init()
	if o.Login != nil {
		s.logins = newLoginState()
	}
	s.metrics = prometheus.NewRegistry()
	if err := s.registerMetrics(); err != nil {
		return nil, err
	}
	s.mux = s.routes()
	return s, nil
}

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Started.IsZero() {
		o.Started = o.Clock.Now()
	}
	if o.SampleInterval <= 0 {
		o.SampleInterval = DefaultSampleInterval
	}
	o.MaxGroupSeries = limit(o.MaxGroupSeries, DefaultMaxGroupSeries)
	o.MaxMemberSeries = limit(o.MaxMemberSeries, DefaultMaxMemberSeries)
	d := &o.Degraded
	d.WindowFull = durationOr(d.WindowFull, DefaultWindowFull)
	d.QueueAge = durationOr(d.QueueAge, DefaultQueueAge)
	d.ShareWindow = durationOr(d.ShareWindow, DefaultShareWindow)
	if d.ShareTolerance == 0 {
		d.ShareTolerance = DefaultShareTolerance
	}
	if d.ShareMinMessages == 0 {
		d.ShareMinMessages = DefaultShareMinMessages
	}
	return o
}

// limit resolves a bound whose zero means its default and whose negative
// values mean none (0).
func limit(v, d int) int {
	switch {
	case v == 0:
		return d
	case v < 0:
		return 0
	}
	return v
}

// durationOr resolves a threshold: zero is the default, negative is off
// (returned as is; the rules test for > 0).
func durationOr(v, d time.Duration) time.Duration {
	if v == 0 {
		return d
	}
	return v
}

// SetReady sets the gateway's ready flag behind /readyz: the gateway sets
// it once its listeners accept and its storage is restored, and clears it
// when it begins to shut down so that load balancers stop sending first.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// Start starts the sampler and, when Options.SysInterval is set, the $SYS
// publisher. It takes one sample at once, so rates start from a baseline.
// Calling it again does nothing.
func (s *Server) Start() {
	s.startOnce.Do(func() {
		s.sample(s.clock.Now())
		s.loop(s.opts.SampleInterval, func() { s.sample(s.clock.Now()) })
		if s.opts.SysInterval > 0 {
			s.loop(s.opts.SysInterval, func() { s.publishSys(s.clock.Now()) })
		}
	})
}

// loop runs f every d until Shutdown.
func (s *Server) loop(d time.Duration, f func()) {
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				f()
			}
		}
	}()
}

// Serve serves HTTP on l until Shutdown, which makes it return
// http.ErrServerClosed. It may be called for several listeners. Timeouts
// keep a slow or stuck browser from holding connections forever.
func (s *Server) Serve(l net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.httpMu.Lock()
	if s.shutdown {
		s.httpMu.Unlock()
		l.Close()
		return http.ErrServerClosed
	}
	s.https[hs] = struct{}{}
	s.httpMu.Unlock()
	return hs.Serve(l)
}

// Shutdown clears the ready flag, stops the $SYS publisher and the
// sampler, closes the listeners given to Serve and waits (within ctx) for
// requests in progress. It is safe to call more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.SetReady(false) // first, so that a probe in progress sees it
	s.stopOnce.Do(func() { close(s.stop) })
	s.loops.Wait()
	s.httpMu.Lock()
	s.shutdown = true
	servers := make([]*http.Server, 0, len(s.https))
	for hs := range s.https {
		servers = append(servers, hs)
	}
	s.httpMu.Unlock()
	var errs []error
	for _, hs := range servers {
		if err := hs.Shutdown(ctx); err != nil {
			hs.Close()
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ServeHTTP serves the page, the API, /metrics and the probes, the first
// three behind the login when Options.Login is set.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// The page loads nothing from elsewhere; say so, so a browser refuses
	// anything injected.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if s.logins != nil && !openPath(r.URL.Path) && !s.authorize(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) broker.Timer {
	return time.AfterFunc(d, f)
}
