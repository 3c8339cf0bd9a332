package peer

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"time"
)

// Defaults for Options. Together they set the bounds the package doc
// states: a silently hung peer is passed over within PingInterval +
// PingTimeout (1.5 s), a directed delivery gets its answer or ErrTimeout
// within DeliverTimeout (2 s).
const (
	DefaultDeliverTimeout   = 2 * time.Second
	DefaultPingInterval     = 500 * time.Millisecond
	DefaultPingTimeout      = time.Second
	DefaultFailureThreshold = 3
	DefaultOpenTimeout      = time.Second
	DefaultMaxQueued        = 4096
	DefaultMaxInFlight      = 4096
	DefaultReconnectMax     = 2 * time.Second
)

// The first delay before redialling a peer, doubled on each failed dial up
// to Options.ReconnectMax, and how long one dial (connection, TLS and
// Hello) may take.
const (
	reconnectMin = 50 * time.Millisecond
	dialTimeout  = 2 * time.Second
)

// Options configure a Mesh. Node and Handler are required; every other
// zero value means the default named beside it. Options are read once, by
// New.
type Options struct {
	// Node is this node's name as registered; peers with a name that
	// sorts after it are dialled by this node, the others dial it, so
	// each pair of nodes shares one stream.
	Node string
	// Cluster names the cluster. Streams are accepted only from nodes of
	// the same cluster.
	Cluster string
	// Handler receives what peers send.
	Handler Handler
	// Transport carries the streams. Default: NewGRPC with TLS. The Mesh
	// owns it: Close closes it.
	Transport Transport
	// TLS makes the default transport mutual TLS (see GRPCOptions.TLS);
	// Identity does so with certificates that may change while the node
	// runs (GRPCOptions.Identity). At most one; none when Transport is
	// set.
	TLS      *tls.Config
	Identity Identity

	// DeliverTimeout is how long a directed delivery may wait for its
	// answer before it completes with ErrTimeout. It counts from Deliver,
	// so it includes the time in the queue. Default
	// DefaultDeliverTimeout.
	DeliverTimeout time.Duration
	// PingInterval is how often each stream is pinged, and PingTimeout
	// how long a ping may go unanswered before the peer is taken for hung
	// and its breaker opens. Defaults DefaultPingInterval and
	// DefaultPingTimeout.
	PingInterval time.Duration
	PingTimeout  time.Duration
	// FailureThreshold is how many directed deliveries in a row may time
	// out before the peer's breaker opens. A broken stream or a missed
	// pong opens it at once. Default DefaultFailureThreshold.
	FailureThreshold int
	// OpenTimeout is how long a breaker stays open before a ping probes
	// the peer (half-open). Default DefaultOpenTimeout.
	OpenTimeout time.Duration
	// MaxQueued bounds the records waiting for a peer's writer; Send and
	// Deliver fail with ErrQueueFull beyond it. Answers and pings are not
	// counted. Default DefaultMaxQueued.
	MaxQueued int
	// MaxInFlight bounds a peer's directed deliveries waiting for their
	// answer; Deliver fails with ErrQueueFull beyond it. Default
	// DefaultMaxInFlight.
	MaxInFlight int
	// ReconnectMax caps the backoff between dials to a peer that cannot
	// be reached. Default DefaultReconnectMax.
	ReconnectMax time.Duration

	// Logger receives the mesh's logs; nil discards them.
	Logger *slog.Logger

	// clock is this node's clock for the readings frames carry, in
	// nanoseconds from any origin; tests set it to put two nodes' clocks
	// apart. Default: the monotonic clock since New.
	clock func() int64
}

// withDefaults checks o and fills in its zero values.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Node == "":
		return o, errors.New("peer: Options.Node is required")
	case o.Handler == nil:
		return o, errors.New("peer: Options.Handler is required")
	case o.Transport != nil && (o.TLS != nil || o.Identity != nil):
		return o, errors.New("peer: Options.TLS and Identity apply to the default transport only")
	case o.TLS != nil && o.Identity != nil:
		return o, errors.New("peer: Options.TLS or Options.Identity, not both")
	case o.DeliverTimeout < 0, o.PingInterval < 0, o.PingTimeout < 0, o.OpenTimeout < 0,
		o.ReconnectMax < 0, o.FailureThreshold < 0, o.MaxQueued < 0, o.MaxInFlight < 0:
		return o, errors.New("peer: negative Options value")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.DeliverTimeout, DefaultDeliverTimeout)
	def(&o.PingInterval, DefaultPingInterval)
	def(&o.PingTimeout, DefaultPingTimeout)
	def(&o.OpenTimeout, DefaultOpenTimeout)
	def(&o.ReconnectMax, DefaultReconnectMax)
	if o.FailureThreshold == 0 {
		o.FailureThreshold = DefaultFailureThreshold
	}
	if o.MaxQueued == 0 {
		o.MaxQueued = DefaultMaxQueued
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.Transport == nil {
		o.Transport = NewGRPC(GRPCOptions{TLS: o.TLS, Identity: o.Identity})
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.clock == nil {
		// Monotonic, not the wall clock: a receiver judges ages by
		// differences of one sender's readings, which an NTP step of
		// either clock would otherwise shift by the size of the step.
		epoch := time.Now()
		o.clock = func() int64 { return int64(time.Since(epoch)) }
	}
	return o, nil
}
