package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/linemq/linemq/gateway/auth"
)

// Login makes the status page, the API and /metrics ask for a user name and
// password (HTTP Basic authentication); /healthz and /readyz stay open for
// supervisors and load balancers.
type Login struct {
	// Verifier checks a user name and password: gateway/auth's
	// Authenticator, so the status page's users are the password file's,
	// with its constant-time check and its throttle of failing addresses.
	Verifier Verifier
	// Users are the users who may log in; a user the Verifier accepts
	// but not listed here gets 403 Forbidden. Empty: every user.
	Users []string
	// Admins are the users who may also change the gateway through the
	// API: upload an update bundle (update.admins). Empty: nobody.
	Admins []string
}

// Verifier checks a login; see auth.Authenticator.Verify for the errors.
// remote is the client's address, for throttling.
type Verifier interface {
	Verify(ctx context.Context, remote net.Addr, user string, password []byte) error
}

// Login timings.
const (
	// loginTimeout bounds how long a request waits for its password check,
	// throttle included; past it the answer is 429.
	loginTimeout = 10 * time.Second
	// loginRemember is how long a verified user name and password are
	// remembered, so that the page's polls (three or so requests a second)
	// do not each pay for a password hash. ForgetLogins clears them at
	// once (the gateway calls it on reload).
	loginRemember = time.Minute
	// maxRemembered bounds the remembered logins; only successful ones are
	// kept, so only someone who knows passwords can fill it.
	maxRemembered = 64
)

// loginState is the Server's record of recent successful logins.
type loginState struct {
	key []byte // HMAC key: the map holds no password, nor a plain hash of one

	mu   sync.Mutex
	seen map[[sha256.Size]byte]time.Time // MAC of user and password -> until
}

func newLoginState() *loginState {
	k := make([]byte, 32)
	rand.Read(k)
	return &loginState{key: k, seen: make(map[[sha256.Size]byte]time.Time)}
}

func (l *loginState) mac(user, password string) [sha256.Size]byte {
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(password))
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
}

func (l *loginState) known(k [sha256.Size]byte, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.seen[k]
	return ok && now.Before(until)
}

func (l *loginState) remember(k [sha256.Size]byte, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seen) >= maxRemembered {
		for k, until := range l.seen {
			if !now.Before(until) || len(l.seen) >= maxRemembered {
				delete(l.seen, k)
			}
		}
	}
	l.seen[k] = now.Add(loginRemember)
}

func (l *loginState) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.seen)
}

// ForgetLogins drops the remembered logins, so that the next request of
// every browser is checked against the password file again. The gateway
// calls it after reloading the password file (SIGHUP), so that a changed
// or removed password stops working at once.
func (s *Server) ForgetLogins() {
	if s.logins != nil {
		s.logins.forget()
	}
}

// openPath reports whether path is served without a login: the probes.
func openPath(path string) bool { return path == "/healthz" || path == "/readyz" }

// authorize checks the request's login and, when it fails, answers it: 401
// with a Basic challenge (no or wrong credentials), 403 (a user not in
// Login.Users), 429 (the address failed too often lately).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	lg := s.opts.Login
	user, password, ok := r.BasicAuth()
	if !ok || user == "" {
		s.refuse(w, r, http.StatusUnauthorized, "log in with a user of the gateway's password file")
		return false
	}
	now := time.Now()
	k := s.logins.mac(user, password)
	if !s.logins.known(k, now) {
		ctx, cancel := context.WithTimeout(r.Context(), loginTimeout)
		err := lg.Verifier.Verify(ctx, remoteAddr(r), user, []byte(password))
		cancel()
		switch {
		case errors.Is(err, auth.ErrThrottled):
			w.Header().Set("Retry-After", "10")
			s.refuse(w, r, http.StatusTooManyRequests, "too many failed logins from this address; try again later")
			return false
		case err != nil:
			s.refuse(w, r, http.StatusUnauthorized, "wrong user name or password")
			return false
		}
		s.logins.remember(k, now)
	}
	if len(lg.Users) > 0 && !slices.Contains(lg.Users, user) {
		s.refuse(w, r, http.StatusForbidden, "user "+user+" may not use the status page (http.users)")
		return false
	}
	return true
}

// refuse answers a request the login turned away: JSON under /api/, as the
// API's other errors, and text elsewhere.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="linemq `+strings.ReplaceAll(s.opts.NodeID, `"`, "")+`", charset="UTF-8"`)
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeError(w, r, code, msg)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, msg, code)
}

// remoteAddr returns the request's peer as a net.Addr, for the throttle.
func remoteAddr(r *http.Request) net.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return net.TCPAddrFromAddrPort(ap)
	}
	return &net.TCPAddr{}
}
