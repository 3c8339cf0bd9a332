package listen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/certs"
)

// DefaultHandshakeTimeout bounds a TLS handshake or a WebSocket upgrade.
const DefaultHandshakeTimeout = 10 * time.Second

// Options are the settings of listeners that are not in the configuration
// file. The zero value is the defaults.
type Options struct {
	// Logger receives refusals at the connection limit (at most one record
	// every refusalLogEvery per listener), failed handshakes (debug) and
	// certificate reloads. Nil discards.
	Logger *slog.Logger

	// HandshakeTimeout bounds a TLS handshake or a WebSocket upgrade, so
	// that a client that opens a connection and says nothing holds its
	// place for no longer. Default 10s.
	HandshakeTimeout time.Duration

	// ReloadInterval is how often a tls or wss listener looks at its
	// certificate, key, CA and CRL files, to Reload them once they have
	// changed and settled (gateway/certs.Watcher). Default
	// certs.DefaultInterval; negative: only calls to Reload read them.
	ReloadInterval time.Duration
}

// refusalLogEvery rate-limits the log record of refusals at the limit: a
// flood of connections must not become a flood of log lines on an SD card.
const refusalLogEvery = 10 * time.Second

// Listener is a net.Listener for MQTT clients of one transport. Accept
// returns connections ready to carry MQTT bytes: TLS handshakes and
// WebSocket upgrades happen beforehand, in goroutines of the listener, so
// one slow client never holds up the next; a failed handshake is logged
// and never reaches Accept. Give it to broker.Server.Serve.
//
// The connections of a TLS or WSS listener have a method Identity()
// string, the name of the client's verified certificate, and their
// RemoteAddr is then a *PeerAddr carrying it.
type Listener struct {
	cfg  Config // with defaults
	log  *slog.Logger
	opts Options

	tcp       net.Listener // the socket
	count     counter
	tlsCfg    atomic.Pointer[tls.Config] // tls, wss: replaced by Reload
	verified  verifiedConns              // tls, wss: open connections with a verified client certificate
	http      *http.Server               // ws, wss
	ready     chan net.Conn              // tls, ws, wss: handshaken connections
	acceptErr chan error                 // tls: a fatal error from the socket

	ctx     context.Context // ends handshakes in progress at Close
	cancel  context.CancelFunc
	done    chan struct{} // closed by Close
	closing sync.Once
	wg      sync.WaitGroup // the listener's goroutines

	refused    atomic.Int64 // connections refused at the limit
	born       time.Time    // when Listen ran: lastLogged counts from it, on the monotonic clock
	lastLogged atomic.Int64 // nanoseconds since born of the last refusal record, 0 for none
}

// Listen opens a listener for cfg (its unset fields at their defaults).
// The listener runs until Close; ctx only bounds opening the socket.
func Listen(ctx context.Context, cfg Config, opts Options) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	c := cfg.WithDefaults()
	l := &Listener{cfg: c, opts: opts, log: opts.Logger.With("listener", string(c.Type)), done: make(chan struct{}), born: time.Now()}
	l.count.max = int(c.MaxConnections)
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if c.Type.secure() {
		tc, err := l.loadTLS()
		if err != nil {
			l.cancel()
			return nil, err
		}
		l.tlsCfg.Store(tc.Config)
		l.verified.m = map[net.Conn][][]*x509.Certificate{}
	}
	var lc net.ListenConfig
	tcp, err := lc.Listen(ctx, "tcp", c.Address)
	if err != nil {
		l.cancel()
		return nil, err
	}
	l.tcp = tcp
	l.log = l.log.With("addr", tcp.Addr().String())
	if c.Type.secure() && opts.ReloadInterval >= 0 {
		w := certs.NewWatcher([]string{c.CertFile, c.KeyFile, c.CAFile, c.CRLFile}, opts.ReloadInterval, func() { l.Reload() })
		l.wg.Go(func() { w.Run(l.ctx) })
	}

	switch c.Type {
	case TLS:
		l.ready = make(chan net.Conn)
		l.acceptErr = make(chan error, 1)
		l.wg.Go(l.acceptTLS)
	case WS, WSS:
		l.ready = make(chan net.Conn)
		l.http = &http.Server{
			Handler:           http.HandlerFunc(l.serveWS),
			ReadHeaderTimeout: opts.HandshakeTimeout,
			// A connection that is not upgraded must not keep its place.
			IdleTimeout: opts.HandshakeTimeout,
			// An upgrade request is a few hundred bytes.
			MaxHeaderBytes: 16 << 10,
			ErrorLog:       slog.NewLogLogger(l.log.Handler(), slog.LevelDebug),
		}
		var inner net.Listener = &countingListener{l: l}
		if c.Type == WSS {
			inner = tls.NewListener(inner, l.serverTLS())
		}
		l.wg.Go(func() { l.http.Serve(inner) })
	}
	return l, nil
}

// Open opens a listener for each of cfgs, in order. If one fails, those
// already open are closed and the error names its key ("listeners[1]").
func Open(ctx context.Context, cfgs Configs, opts Options) ([]*Listener, error) {
	if err := cfgs.Validate(); err != nil {
		return nil, err
	}
	var ls []*Listener
	for i, c := range cfgs {
		l, err := Listen(ctx, c, opts)
		if err != nil {
			for _, o := range ls {
				o.Close()
			}
			return nil, &Error{Key: fmt.Sprintf("listeners[%d]", i), Err: err}
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// Type returns the listener's transport.
func (l *Listener) Type() Type { return l.cfg.Type }

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.tcp.Addr() }

// URL returns the address as a client would write it:
// "mqtts://host:port", "wss://host:port/mqtt".
func (l *Listener) URL() string {
	scheme := map[Type]string{TCP: "mqtt", TLS: "mqtts", WS: "ws", WSS: "wss"}[l.cfg.Type]
	u := scheme + "://" + l.tcp.Addr().String()
	if l.cfg.Type.web() {
		u += l.cfg.Path
	}
	return u
}

// Conns returns the number of connections open on the listener, handshakes
// in progress included.
func (l *Listener) Conns() int { return int(l.count.open.Load()) }

// Refused returns the number of connections refused at MaxConnections.
func (l *Listener) Refused() int64 { return l.refused.Load() }

// Accept waits for the next connection ready for MQTT.
func (l *Listener) Accept() (net.Conn, error) {
	if l.ready == nil {
		return l.acceptCounted()
	}
	select {
	case c := <-l.ready:
		return c, nil
	case err := <-l.acceptErr:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting, ends handshakes in progress and waits for the
// listener's goroutines. Connections already accepted stay open: they
// belong to whoever accepted them (the broker closes its own at Shutdown).
// It returns nil when called again.
func (l *Listener) Close() error {
	var err error
	l.closing.Do(func() {
		close(l.done)
		l.cancel()
		err = l.tcp.Close()
		if l.http != nil {
			// Closes the requests being upgraded; hijacked (accepted)
			// connections are not the server's any more.
			l.http.Close()
		}
		l.wg.Wait()
	})
	return err
}

// Reload reads the certificate, key, CA and CRL files of a tls or wss
// listener again (the listener does so by itself when they change): new
// handshakes use them, established connections keep theirs, except those
// whose client certificate the new revocation list revokes, which are
// closed. On an error the files in force stay, and the error says which
// file. For other types it does nothing.
func (l *Listener) Reload() error {
	if !l.cfg.Type.secure() {
		return nil
	}
	tc, err := l.loadTLS()
	if err != nil {
		l.log.Error("certificate reload failed; the previous certificate stays in force", "err", err)
		return fmt.Errorf("%s: %w", l.URL(), err)
	}
	l.tlsCfg.Store(tc.Config)
	args := []any{"cert_file", l.cfg.CertFile}
	if leaf := tc.Certificates[0].Leaf; leaf != nil {
		args = append(args, "subject", leaf.Subject.String(), "expires", leaf.NotAfter)
	}
	if l.cfg.CRLFile != "" {
		args = append(args, "crl_file", l.cfg.CRLFile)
	}
	l.log.Info("certificate reloaded", args...)
	for c, r := range l.verified.revoked(tc.crl) {
		l.log.Warn("closing a connection whose client certificate is now revoked",
			"remote", c.RemoteAddr().String(), "serial", r.SerialNumber.String(), "subject", r.Subject.String())
		c.Close()
	}
	return nil
}

// loaded is the TLS configuration of one loading of the files, with the
// revocation list it checks.
type loaded struct {
	*tls.Config
	crl *certs.CRL // nil without crl_file
}

// loadTLS reads the files into the configuration handshakes use.
func (l *Listener) loadTLS() (loaded, error) {
	c := &l.cfg
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return loaded{}, &Error{Key: certKey(c, err), Err: errors.New(plainTLSError(err))}
	}
	tc := loaded{Config: &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.NoClientCert,
		// Client certificates are checked against the clock, floored at
		// this certificate's issue: a board whose clock is not yet set
		// must not refuse every client as "not yet valid".
		Time: certs.VerifyTime(cert.Leaf.NotBefore),
	}}
	if c.CAFile != "" {
		cas, err := certs.ParseCAs(c.CAFile)
		if err != nil {
			return loaded{}, &Error{Key: "ca_file", Err: err}
		}
		tc.ClientCAs = certs.Pool(cas)
		tc.ClientAuth = tls.VerifyClientCertIfGiven
		if c.RequireClientCert {
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
		if c.CRLFile != "" {
			crl, err := certs.LoadCRL(c.CRLFile, cas)
			if err != nil {
				return loaded{}, &Error{Key: "crl_file", Err: err}
			}
			if stale := crl.Stale(time.Now()); stale != nil {
				l.log.Warn("a revocation list is past its next update; it stays in force until a newer one arrives", "crl_file", c.CRLFile, "issuers", stale)
			}
			tc.crl = crl
			tc.VerifyConnection = func(cs tls.ConnectionState) error {
				if r := crl.RevokedChains(cs.VerifiedChains); r != nil {
					return certs.RevokedError(r)
				}
				return nil
			}
		}
	}
	if c.Type == WSS {
		tc.NextProtos = []string{"http/1.1"} // WebSocket upgrades are HTTP/1.1
	}
	return tc, nil
}

// verifiedConns are a listener's open connections whose clients presented
// a verified certificate, with its chains, so that a new revocation list
// can close those it revokes.
type verifiedConns struct {
	mu sync.Mutex
	m  map[net.Conn][][]*x509.Certificate
}

// add records c, and returns the function that forgets it (for c's Close).
func (v *verifiedConns) add(c net.Conn, chains [][]*x509.Certificate) func() {
	if len(chains) == 0 {
		return nil
	}
	v.mu.Lock()
	v.m[c] = chains
	v.mu.Unlock()
	return func() {
		v.mu.Lock()
		delete(v.m, c)
		v.mu.Unlock()
	}
}

// revoked returns the connections crl revokes, with the revoked
// certificate of each.
func (v *verifiedConns) revoked(crl *certs.CRL) map[net.Conn]*x509.Certificate {
	if crl == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var out map[net.Conn]*x509.Certificate
	for c, chains := range v.m {
		if r := crl.RevokedChains(chains); r != nil {
			if out == nil {
				out = map[net.Conn]*x509.Certificate{}
			}
			out[c] = r
		}
	}
	return out
}

// serverTLS is the configuration given to tls.Server: it hands each
// handshake the configuration in force, so that Reload takes effect
// without a new socket.
func (l *Listener) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return l.tlsCfg.Load(), nil
		},
	}
}

// acceptCounted accepts the next TCP connection within the limit; those
// beyond it are closed at once. It retries on the errors that pass (out
// of descriptors) so that the caller sees only a closed or broken socket.
func (l *Listener) acceptCounted() (net.Conn, error) {
	var backoff time.Duration
	for {
		nc, err := l.tcp.Accept()
		if err != nil {
			select {
			case <-l.done:
				return nil, net.ErrClosed
			default:
			}
			if !broker.TemporaryAcceptError(err) {
				return nil, err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.log.Warn("accept failed; retrying", "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
			case <-l.done:
				return nil, net.ErrClosed
			}
			continue
		}
		backoff = 0
		if !l.count.acquire() {
			nc.Close()
			l.refusedOne()
			continue
		}
		tc, ok := nc.(*net.TCPConn)
		if !ok { // cannot happen with a "tcp" listener
			nc.Close()
			l.count.release()
			continue
		}
		cc := &countedConn{TCPConn: tc, c: &l.count, maxPacket: int(l.cfg.MaxPacketSize)}
		if l.cfg.AllowAnonymous != nil {
			cc.remote = peerAddr(tc.RemoteAddr(), "", l.cfg.AllowAnonymous)
		}
		return cc, nil
	}
}

// refusedOne counts a refusal and logs it, at most once per
// refusalLogEvery.
func (l *Listener) refusedOne() {
	n := l.refused.Add(1)
	now := int64(time.Since(l.born)) + 1
	last := l.lastLogged.Load()
	if (last == 0 || now-last >= int64(refusalLogEvery)) && l.lastLogged.CompareAndSwap(last, now) {
		l.log.Warn("connection refused: listener at max_connections", "max_connections", l.cfg.MaxConnections, "refused_total", n)
	}
}

// acceptTLS accepts TCP connections and runs each one's handshake in a
// goroutine of its own.
func (l *Listener) acceptTLS() {
	srv := l.serverTLS()
	for {
		nc, err := l.acceptCounted()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.acceptErr <- err
			}
			return
		}
		l.wg.Go(func() { l.handshake(tls.Server(nc, srv)) })
	}
}

// handshake completes a TLS handshake within the timeout and hands the
// connection to Accept.
func (l *Listener) handshake(tc *tls.Conn) {
	tc.SetDeadline(time.Now().Add(l.opts.HandshakeTimeout))
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		l.log.Debug("TLS handshake failed", "remote", tc.RemoteAddr().String(), "err", err)
		tc.Close()
		return
	}
	tc.SetDeadline(time.Time{})
	cs := tc.ConnectionState()
	id := certIdentity(&cs)
	c := &tlsConn{Conn: tc, remote: peerAddr(tc.RemoteAddr(), id, l.cfg.AllowAnonymous), id: id, maxPacket: int(l.cfg.MaxPacketSize)}
	c.forget = l.verified.add(c, cs.VerifiedChains)
	select {
	case l.ready <- c:
	case <-l.done:
		c.Close()
	}
}

// countingListener is the listener's socket with the connection limit,
// for the HTTP server of a ws or wss listener.
type countingListener struct{ l *Listener }

func (c *countingListener) Accept() (net.Conn, error) { return c.l.acceptCounted() }
func (c *countingListener) Close() error              { return c.l.tcp.Close() }
func (c *countingListener) Addr() net.Addr            { return c.l.tcp.Addr() }
