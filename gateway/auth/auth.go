package auth

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/topic"
)

// Defaults of Options.
const (
	DefaultFreeFailures    = 3
	DefaultFailureDelay    = 500 * time.Millisecond
	DefaultMaxFailureDelay = 5 * time.Second
	DefaultForgetAfter     = 10 * time.Minute
	DefaultMaxTracked      = 4096
)

// Options are the settings of an Authenticator that are not in the
// configuration file. The zero value is the defaults.
type Options struct {
	// Logger receives reloads, refusals worth knowing about and the
	// one-time hint about anonymous clients. Nil discards.
	Logger *slog.Logger

	// FreeFailures is how many failed password checks an address may make
	// before its checks are spaced out: the one after them waits
	// FailureDelay. Checks still running count, so a burst of connections
	// gets no more. Default 3.
	FreeFailures int
	// FailureDelay is the spacing after FreeFailures failures; it doubles
	// with each further failure. Default 500ms.
	FailureDelay time.Duration
	// MaxFailureDelay caps the spacing. Keep it well under the broker's
	// ConnectTimeout, which bounds how long a client waits. Default 5s.
	MaxFailureDelay time.Duration
	// ForgetAfter is how long an address's failures are remembered.
	// Default 10m.
	ForgetAfter time.Duration
	// MaxTracked is how many addresses' failures are remembered at most.
	// Default 4096 (about half a megabyte).
	MaxTracked int
	// MaxConcurrentChecks bounds the password hashes computed at once, so
	// that a flood of CONNECTs costs queueing rather than every core.
	// Default: the number of CPUs.
	MaxConcurrentChecks int

	// now replaces time.Now in tests.
	now func() time.Time
}

// withDefaults fills in the zero fields.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.FreeFailures == 0 {
		o.FreeFailures = DefaultFreeFailures
	}
	if o.FailureDelay == 0 {
		o.FailureDelay = DefaultFailureDelay
	}
	if o.MaxFailureDelay == 0 {
		o.MaxFailureDelay = DefaultMaxFailureDelay
	}
	if o.ForgetAfter == 0 {
		o.ForgetAfter = DefaultForgetAfter
	}
	if o.MaxTracked == 0 {
		o.MaxTracked = DefaultMaxTracked
	}
	if o.MaxConcurrentChecks == 0 {
		o.MaxConcurrentChecks = runtime.NumCPU()
	}
	if o.now == nil {
		o.now = time.Now
	}
	return o
}

// Authenticator is a broker.Authenticator over a Mosquitto password file,
// a Mosquitto ACL file and client-certificate identities. It is safe for
// concurrent use, and Reload may run while clients are being checked.
type Authenticator struct {
	cfg      Config
	log      *slog.Logger
	throttle *throttle
	checks   chan struct{} // semaphore of password checks
	now      func() time.Time

	rules atomic.Pointer[rules] // replaced whole by Reload

	hinted atomic.Bool // the anonymous hint has been logged
}

// rules is what the files say, swapped atomically on Reload so that a
// check sees one consistent version.
type rules struct {
	pw  *passwords // nil without a password file
	acl *acl       // nil without an ACL file
}

// Identity is implemented by the remote address of a connection whose
// client proved who it is below MQTT, with a TLS client certificate
// (gateway/listen.PeerAddr does). The Authenticator takes Identity() as the
// client's user name: it needs no password, and the user name in CONNECT
// is ignored.
type Identity interface {
	Identity() string
}

// New returns an Authenticator for cfg, having read its files.
func New(cfg Config, opts Options) (*Authenticator, error) {
	o := opts.withDefaults()
	a := &Authenticator{
		cfg:      cfg,
		log:      o.Logger,
		throttle: newThrottle(o.FreeFailures, o.FailureDelay, o.MaxFailureDelay, o.ForgetAfter, o.MaxTracked, o.now),
		checks:   make(chan struct{}, o.MaxConcurrentChecks),
		now:      o.now,
	}
	r, err := a.load()
	if err != nil {
		return nil, err
	}
	a.rules.Store(r)
	return a, nil
}

// load reads the configured files.
func (a *Authenticator) load() (*rules, error) {
	r := &rules{}
	var errs []error
	if f := a.cfg.PasswordFile; f != "" {
		pw, err := loadPasswords(f)
		if err != nil {
			errs = append(errs, err)
		}
		r.pw = pw
		if fi, err := os.Stat(f); err == nil && fi.Mode().Perm()&0o004 != 0 {
			// The hashes are what an attacker needs to guess offline.
			a.log.Warn("password file is readable by every user; chmod o-r it", "file", f)
		}
	}
	if f := a.cfg.ACLFile; f != "" {
		acl, err := loadACL(f)
		if err != nil {
			errs = append(errs, err)
		}
		r.acl = acl
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the password and ACL files again and, if both parse,
// applies them to every check from now on. Connected clients stay
// connected; their next publish and subscribe are checked against the new
// rules, but subscriptions they already have are not withdrawn. When a
// file does not parse, the rules in force stay, and the error names the
// file and line.
func (a *Authenticator) Reload() error {
	r, err := a.load()
	if err != nil {
		a.log.Error("auth reload failed; the previous files stay in force", "err", err)
		return err
	}
	a.rules.Store(r)
	users, aclUsers := 0, 0
	if r.pw != nil {
		users = len(r.pw.users)
	}
	if r.acl != nil {
		aclUsers = len(r.acl.users)
	}
	a.log.Info("auth reloaded", "password_file", a.cfg.PasswordFile, "users", users, "acl_file", a.cfg.ACLFile, "acl_users", aclUsers)
	return nil
}

// identity returns the certificate identity of the client at addr, if any.
func identity(addr net.Addr) string {
	for addr != nil {
		if id, ok := addr.(Identity); ok {
			if s := id.Identity(); s != "" {
				return s
			}
		}
		u, ok := addr.(interface{ Unwrap() net.Addr })
		if !ok {
			break
		}
		addr = u.Unwrap()
	}
	return ""
}

// ListenerPolicy is implemented by the remote address of a connection
// whose listener has an anonymous policy of its own (gateway/listen's
// allow_anonymous): it overrides auth.allow_anonymous for that listener.
type ListenerPolicy interface {
	// AllowAnonymous returns the listener's setting, or nil for none.
	AllowAnonymous() *bool
}

// listenerAnonymous returns the anonymous policy of the listener the
// client at addr came through, or nil.
func listenerAnonymous(addr net.Addr) *bool {
	for addr != nil {
		if p, ok := addr.(ListenerPolicy); ok {
			if v := p.AllowAnonymous(); v != nil {
				return v
			}
		}
		u, ok := addr.(interface{ Unwrap() net.Addr })
		if !ok {
			break
		}
		addr = u.Unwrap()
	}
	return nil
}

// Authenticate decides a CONNECT:
//
//   - A client with a certificate identity is accepted as that user.
//   - With a password file, a client giving a user name must give its
//     password: otherwise 0x86 Bad user name or password (3.1.1: 0x04).
//     An address that keeps failing has its checks spaced out; one whose
//     queue of checks is longer than the client would wait gets 0x9F
//     Connection rate exceeded (3.1.1: 0x03) without a check.
//   - Anyone else is anonymous (without a password file a user name proves
//     nothing): accepted when allow_anonymous is true; when it is unset and
//     no password file is configured, accepted from loopback only;
//     otherwise 0x87 Not authorized (3.1.1: 0x05). A listener's own
//     allow_anonymous, when set, replaces auth.allow_anonymous for its
//     clients.
func (a *Authenticator) Authenticate(ctx context.Context, req broker.ConnectRequest) packet.ReasonCode {
	if identity(req.RemoteAddr) != "" {
		return packet.Success
	}
	r := a.rules.Load()
	if req.Username != "" && r.pw != nil {
		return a.checkPassword(ctx, r.pw, req)
	}
	allow := a.cfg.AllowAnonymous
	if l := listenerAnonymous(req.RemoteAddr); l != nil {
		allow = l
	}
	switch {
	case allow != nil && *allow:
		return packet.Success
	case allow == nil && r.pw == nil && isLocal(req.RemoteAddr):
		return packet.Success
	case allow == nil && r.pw == nil && a.hinted.CompareAndSwap(false, true):
		a.log.Warn("anonymous client refused: without authentication only clients on this machine may connect. "+
			"Add users with `linemq passwd FILE USER` and set auth.password_file, "+
			"or set auth.allow_anonymous: true to let anyone on the network in",
			"addr", addrString(req.RemoteAddr), "client", req.ClientID)
	}
	return packet.NotAuthorized
}

// checkPassword checks a user name and password, spaced out by the
// throttle and bounded by the semaphore.
func (a *Authenticator) checkPassword(ctx context.Context, pw *passwords, req broker.ConnectRequest) packet.ReasonCode {
	key := throttleKey(req.RemoteAddr)
	limit := a.now().Add(a.throttle.max * 2)
	if dl, ok := ctx.Deadline(); ok && dl.Before(limit) {
		limit = dl
	}
	var slot time.Time
	for {
		s, decide, ok := a.throttle.reserve(key, limit)
		if !ok {
			return packet.ConnectionRateExceeded
		}
		if decide == nil {
			slot = s
			break
		}
		// The address's free checks are still running: their outcome
		// says whether this one is free too.
		select {
		case <-decide:
		case <-ctx.Done():
			return packet.ConnectionRateExceeded
		}
	}
	if wait := slot.Sub(a.now()); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			a.throttle.abandoned(key)
			return packet.ConnectionRateExceeded
		}
	}
	select {
	case a.checks <- struct{}{}:
	case <-ctx.Done():
		a.throttle.abandoned(key)
		return packet.ServerBusy
	}
	h, known := pw.users[req.Username]
	if !known {
		h = pw.decoy
	}
	good := h.verify(req.Password) && known
	<-a.checks
	if good {
		a.throttle.succeeded(key)
		return packet.Success
	}
	if n := a.throttle.failed(key); n == a.throttle.free {
		a.log.Warn("repeated failed logins; slowing this address down", "addr", addrString(req.RemoteAddr),
			"failures", n, "user", req.Username)
	}
	return packet.BadUsernameOrPassword
}

// addrString formats an address for the log.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// subjectOf is who the ACL sees: the certificate identity, else the user
// name if a password file verified it, else anonymous. Without a password
// file a user name in CONNECT is only a claim, and giving it the rules of
// that user would let anyone claim to be anyone.
func subjectOf(r *rules, c broker.ClientInfo) subject {
	if id := identity(c.RemoteAddr); id != "" {
		return subject{user: id, id: c.ClientID}
	}
	if r.pw != nil {
		return subject{user: c.Username, id: c.ClientID}
	}
	return subject{id: c.ClientID}
}

// CanPublish reports whether the client may publish to topic. Without an
// ACL file every client may; with one, only where a rule with write
// access matches and no deny rule does.
func (a *Authenticator) CanPublish(c broker.ClientInfo, topic string) bool {
	r := a.rules.Load()
	if r.acl == nil {
		return true
	}
	s := subjectOf(r, c)
	return r.acl.canPublish(&s, topic)
}

// CanSubscribe reports whether the client may subscribe to filter. With an
// ACL file the filter must lie entirely within a rule with read access: a
// wider filter is refused, not trimmed later. A shared subscription
// "$share/<name>/<filter>" is judged on <filter>, so the prefix opens
// nothing, and its share name must not be reserved for other users by a
// share line.
func (a *Authenticator) CanSubscribe(c broker.ClientInfo, filter string) bool {
	r := a.rules.Load()
	if r.acl == nil {
		return true
	}
	group, f, shared, err := topic.ParseShare(filter)
	if err != nil {
		return false
	}
	s := subjectOf(r, c)
	if shared && !r.acl.canJoinShare(&s, group) {
		return false
	}
	return r.acl.canSubscribe(&s, f, a.cfg.ACLOverlap == OverlapFilter)
}

// ReadCheck implements broker.ReadChecker. With acl_overlap: filter and an
// ACL file, every message sent to the client must be one it may read: a
// rule with read access matches its topic and no deny rule does. The
// rules are those in force when the message is sent, so a reload applies
// to the clients already connected too.
func (a *Authenticator) ReadCheck(c broker.ClientInfo) func(topic string) bool {
	if a.cfg.ACLOverlap != OverlapFilter || a.cfg.ACLFile == "" {
		return nil
	}
	return func(topic string) bool {
		r := a.rules.Load()
		if r.acl == nil {
			return true
		}
		s := subjectOf(r, c)
		return r.acl.canRead(&s, topic)
	}
}

// Interface guard.
var (
	_ broker.Authenticator = (*Authenticator)(nil)
	_ broker.ReadChecker   = (*Authenticator)(nil)
)
