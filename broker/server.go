package broker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/topic"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("broker: server closed")

// Server is an MQTT 3.1.1 and 5.0 broker. Make one with New, give it
// listeners with Serve, and stop it with Shutdown.
type Server struct {
	opts  Options
	log   *slog.Logger
	clock Clock
	// born is when New ran, with the monotonic reading that mono counts
	// from: instants kept as integers are durations since born, so that a
	// step of the wall clock (a board without a real-time clock setting
	// its time from NTP) moves none of them.
	born   time.Time
	closed atomic.Bool
	// stopping is closed when Shutdown starts: background work (settling
	// a departed member's messages) gives up then.
	stopping chan struct{}

	mu        sync.Mutex // guards sessions, listeners and conns
	sessions  map[string]*session
	listeners map[net.Listener]struct{}
	live      map[*conn]struct{} // every open connection, CONNECT or not

	subs     *topic.Index[*subscription] // ordinary subscriptions
	shares   *topic.Index[*shareGroup]   // share groups, by their filter
	groupsMu sync.Mutex
	groups   map[groupKey]*shareGroup

	retained retainedStore
	clusterState
	forwards   outboxes   // messages kept for other nodes' ordinary subscribers
	redirects  redirects  // sessions handed to other nodes, still matched here (redirect.go)
	departures departures // sessions handed to other nodes, for forwards held up (departed.go)
	stall      stallWatch // this node's own stalls (stall.go)
	unrouted   unrouted   // messages routed again that found no subscriber yet (unrouted.go)

	// Decode and encode structs are borrowed per read and per send rather
	// than kept in every connection: an idle connection then holds none.
	scratch sync.Pool // *scratch
	outPubs sync.Pool // *packet.Publish

	connLog logLimiter    // rate limit of per-connection log records
	limits  limitCounters // refusals by the limits (limits.go)
	probe   prober        // liveness probes (Probe)

	parker *parker // nil when idle connections are not parked
	syncer *syncer // nil without a Store

	conns   sync.WaitGroup // one per connection goroutine
	stats   counters
	queued  atomic.Int64  // messages queued in all sessions, for MaxQueuedTotal
	pending atomic.Int64  // bytes waiting to be written to all connections, for MaxPendingBytesTotal
	msgIDs  atomic.Uint64 // the last Store id given to a message (Message.storeID)

	connSerial atomic.Uint64 // the last conn.serial given
	// connecting is the read buffer held by connections that have not
	// completed CONNECT (Options.MaxConnectingBytes).
	connecting atomic.Int64

	recent recentRing // recently received messages, for arrival order (arrival.go)
}

// mono returns the monotonic time since the server was made, never 0.
func (srv *Server) mono() int64 { return int64(time.Since(srv.born)) + 1 }

// monoTime turns a mono reading back into a time with a monotonic reading.
func (srv *Server) monoTime(m int64) time.Time { return srv.born.Add(time.Duration(m - 1)) }

// New returns a Server configured by opts, or the options that are invalid.
func New(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	s := &Server{
		stopping:  make(chan struct{}),
		opts:      o,
		log:       o.Logger,
		clock:     o.Clock,
		born:      time.Now(),
		sessions:  make(map[string]*session),
		listeners: make(map[net.Listener]struct{}),
		live:      make(map[*conn]struct{}),
		subs:      topic.NewIndex[*subscription](0),
		shares:    topic.NewIndex[*shareGroup](0),
		groups:    make(map[groupKey]*shareGroup),
	}
	s.routes = make(map[remoteRoute]*remoteRoute)
	s.remote = topic.NewIndex[*remoteRoute](0)
	s.retained.lww = opts.Cluster != nil
	s.scratch.New = func() any { return new(scratch) }
	s.outPubs.New = func() any { return new(packet.Publish) }
	if o.Store != nil {
		if err := s.restore(context.Background()); err != nil {
			return nil, err
		}
	}
	if o.Store != nil {
		s.syncer = newSyncer(s)
	}
	if o.IdleParkAfter > 0 {
		p, err := newParker(s)
		if err != nil {
			s.log.Warn("idle connections will not be parked", "err", err)
		}
		s.parker = p
	}
	s.scheduleJanitor()
	if cu, ok := o.Cluster.(ClusterCatchUp); ok {
		s.stall.on, s.stall.base = true, time.Now()
		go s.watchStalls(cu)
	}
	return s, nil
}

// Serve accepts connections on l until l fails or the server shuts down. It
// always returns a non-nil error; after Shutdown or Close, ErrServerClosed.
func (srv *Server) Serve(l net.Listener) error {
	srv.mu.Lock()
	if srv.closed.Load() {
		srv.mu.Unlock()
		return ErrServerClosed
	}
	srv.listeners[l] = struct{}{}
	srv.mu.Unlock()
	defer func() {
		srv.mu.Lock()
		delete(srv.listeners, l)
		srv.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if srv.closed.Load() {
				return ErrServerClosed
			}
			if TemporaryAcceptError(err) {
				// Out of file descriptors and the like: wait and retry
				// rather than spin or give up on the listener.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				srv.log.Warn("accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := newConn(srv, nc)
		if err := srv.track(c); err != nil {
			nc.Close()
			if err == ErrServerClosed {
				return err
			}
			continue // over MaxConnections and its headroom
		}
		go c.serve()
	}
}

// TemporaryAcceptError reports whether Accept failed for a reason that
// passes (out of file descriptors or buffers, a timeout), so the listener
// should be retried rather than abandoned. Serve retries on it; listeners
// that accept on their own (TLS, WebSocket) use it too.
func TemporaryAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED:
			return true
		}
	}
	return false
}

// ServeConn runs one already-accepted connection (a TLS or WebSocket
// connection from another listener, or a net.Pipe in tests) and returns
// when it ends.
func (srv *Server) ServeConn(nc net.Conn) {
	c := newConn(srv, nc)
	if srv.track(c) != nil {
		nc.Close()
		return
	}
	c.serve()
}

// errAcceptLimit refuses a connection at accept: MaxConnections and its
// headroom are open (see Options.MaxConnections).
var errAcceptLimit = errors.New("broker: too many connections open")

// track registers a new connection, unless the server is shutting down
// (ErrServerClosed) or has too many connections open already
// (errAcceptLimit). Shutdown reaches every connection through this set,
// including those that have not sent CONNECT yet.
func (srv *Server) track(c *conn) error {
	srv.mu.Lock()
	if srv.closed.Load() {
		srv.mu.Unlock()
		return ErrServerClosed
	}
	if srv.overAcceptLimitLocked() {
		open := len(srv.live)
		srv.mu.Unlock()
		srv.refused(limitAccept, "addr", addrString(c.nc.RemoteAddr()), "open", open)
		return errAcceptLimit
	}
	srv.conns.Add(1)
	srv.live[c] = struct{}{}
	srv.mu.Unlock()
	return nil
}

func (srv *Server) untrack(c *conn) {
	srv.mu.Lock()
	delete(srv.live, c)
	srv.mu.Unlock()
	srv.conns.Done()
}

// Shutdown stops accepting connections, tells every v5 client the server is
// shutting down (DISCONNECT 0x8B), closes every connection, publishes the
// wills that this triggers, and waits for the connection goroutines to end
// or for ctx to be done.
func (srv *Server) Shutdown(ctx context.Context) error {
	if !srv.closed.CompareAndSwap(false, true) {
		return ErrServerClosed
	}
	close(srv.stopping)
	srv.mu.Lock()
	for l := range srv.listeners {
		l.Close()
	}
	conns := make([]*conn, 0, len(srv.live))
	for c := range srv.live {
		conns = append(conns, c)
	}
	srv.mu.Unlock()
	for _, c := range conns {
		c.kick(packet.ServerShuttingDown)
	}
	done := make(chan struct{})
	go func() {
		srv.conns.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		for _, c := range conns {
			c.closeSocket()
		}
	}
	srv.parker.close()
	if srv.syncer != nil {
		srv.syncer.close()
	}
	srv.flushDelayedWills()
	return err
}

// Close shuts the server down without waiting for clients.
func (srv *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Publish routes a message from the broker itself (not from a client), as a
// bridge or an internal status topic would.
func (srv *Server) Publish(m *Message) { srv.publishFrom(m, "") }

// publishFrom is Publish, telling the Observer where m comes from (see
// Observer.Observe).
func (srv *Server) publishFrom(m *Message, from string) {
	if m.Retain {
		srv.retain(m)
	}
	srv.routeObserved(m, from)
}

// routeObserved shows m to the Observer and routes it unless the Observer
// holds it back: for a message with no connection to flush or acknowledge.
func (srv *Server) routeObserved(m *Message, from string) {
	seen, after := srv.observe(m, from)
	if seen != HeldBack {
		var r router
		r.route(srv, m, nil)
		r.flush()
	}
	if after != nil {
		after()
	}
}

// Addr returns the address of one listener being served, or nil; handy in
// tests that listen on :0.
func (srv *Server) Addr() net.Addr {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for l := range srv.listeners {
		return l.Addr()
	}
	return nil
}
