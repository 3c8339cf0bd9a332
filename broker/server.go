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
	opts   Options
	log    *slog.Logger
	clock  Clock
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
	forwards  outboxes  // messages kept for other nodes' ordinary subscribers
	redirects redirects // sessions handed to other nodes, still matched here (redirect.go)

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

	recent recentRing // recently received messages, for arrival order (arrival.go)
}

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
	return s, nil
}

// Serve accepts connections on l until l fails or the server shuts down. It
// always returns a non-nil error; after Shutdown or Close, ErrServerClosed.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.closed.Load() {
				return ErrServerClosed
			}
			if TemporaryAcceptError(err) {
				// Out of file descriptors and the like: wait and retry
				// rather than spin or give up on the listener.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := newConn(s, nc)
		if err := s.track(c); err != nil {
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
func (s *Server) ServeConn(nc net.Conn) {
	c := newConn(s, nc)
	if s.track(c) != nil {
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
func (s *Server) track(c *conn) error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.overAcceptLimitLocked() {
		open := len(s.live)
		s.mu.Unlock()
		s.refused(limitAccept, "addr", addrString(c.nc.RemoteAddr()), "open", open)
		return errAcceptLimit
	}
	s.conns.Add(1)
	s.live[c] = struct{}{}
	s.mu.Unlock()
	return nil
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.live, c)
	s.mu.Unlock()
	s.conns.Done()
}

// Shutdown stops accepting connections, tells every v5 client the server is
// shutting down (DISCONNECT 0x8B), closes every connection, publishes the
// wills that this triggers, and waits for the connection goroutines to end
// or for ctx to be done.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrServerClosed
	}
	close(s.stopping)
	s.mu.Lock()
	for l := range s.listeners {
		l.Close()
	}
	conns := make([]*conn, 0, len(s.live))
	for c := range s.live {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.kick(packet.ServerShuttingDown)
	}
	done := make(chan struct{})
	go func() {
		s.conns.Wait()
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
	s.parker.close()
	if s.syncer != nil {
		s.syncer.close()
	}
	s.flushDelayedWills()
	return err
}

// Close shuts the server down without waiting for clients.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Shutdown(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Publish routes a message from the broker itself (not from a client), as a
// bridge or an internal status topic would.
func (s *Server) Publish(m *Message) {
	if m.Retain {
		s.retain(m)
	}
	var r router
	r.route(s, m, nil)
	r.flush()
}

// Addr returns the address of one listener being served, or nil; handy in
// tests that listen on :0.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.listeners {
		return l.Addr()
	}
	return nil
}
