package auth

import (
	"context"
	"errors"
	"net"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
)

// Errors of Verify.
var (
	// ErrNoPasswordFile: no auth.password_file is configured, so there is
	// nobody to log in as.
	ErrNoPasswordFile = errors.New("auth: no password file configured")
	// ErrBadLogin: the user name is unknown or the password wrong (which
	// of the two is not said).
	ErrBadLogin = errors.New("auth: bad user name or password")
	// ErrThrottled: the address has failed too often lately, and its next
	// check would start later than ctx allows; nothing was checked.
	ErrThrottled = errors.New("auth: too many failed logins from this address; try again later")
)

// Verify checks user's password against the password file in force, for
// logins other than MQTT's (the status page's HTTP Basic authentication).
// It is the check a CONNECT gets: constant-time, as costly for a user name
// that does not exist as for one that does, bounded by the same semaphore,
// and throttled by the same record of failures per address (remote's IP,
// or its /64), so guessing over HTTP and over MQTT share one budget. It
// waits for the address's slot within ctx and returns nil, ErrBadLogin,
// ErrThrottled or ErrNoPasswordFile. Certificates and allow_anonymous play
// no part: a password is always required.
func (a *Authenticator) Verify(ctx context.Context, remote net.Addr, user string, password []byte) error {
	r := a.rules.Load()
	if r.pw == nil {
		return ErrNoPasswordFile
	}
	if user == "" {
		return ErrBadLogin
	}
	switch rc := a.checkPassword(ctx, r.pw, broker.ConnectRequest{
		ClientInfo: broker.ClientInfo{RemoteAddr: remote, Username: user}, Password: password,
	}); rc {
	case packet.Success:
		return nil
	case packet.BadUsernameOrPassword:
		return ErrBadLogin
	default: // rate exceeded, or busy until ctx ended
		return ErrThrottled
	}
}
