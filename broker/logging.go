package broker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// connLogRate is how many per-connection records (connects, disconnects,
// refusals) the broker logs per second at info level. A gateway whose
// clients reconnect in a storm must not turn its log into the bottleneck or
// wear its SD card out; what is suppressed is counted in one record.
const connLogRate = 20

// logLimiter lets through at most connLogRate records per second.
type logLimiter struct {
	mu         sync.Mutex
	window     time.Time
	n          int
	suppressed int
}

// allow reports whether a record may be logged now, and how many were
// suppressed in the window that just ended (to be reported once).
func (l *logLimiter) allow(now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Second {
		suppressed, l.suppressed = l.suppressed, 0
		l.window, l.n = now, 0
	}
	if l.n >= connLogRate {
		l.suppressed++
		return false, suppressed
	}
	l.n++
	return true, suppressed
}

// logConn logs a per-connection record at info level, rate-limited.
func (srv *Server) logConn(msg string, args ...any) {
	if !srv.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	ok, suppressed := srv.connLog.allow(time.Now())
	if suppressed > 0 {
		srv.log.Info("connection records suppressed", "count", suppressed, "limit_per_second", connLogRate)
	}
	if ok {
		srv.log.Info(msg, args...)
	}
}

// addrString is a connection's remote address for logs.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// disconnectCause says in words why a connection ended, for the log.
func disconnectCause(reason packet.ReasonCode, cause error) string {
	switch {
	case errors.Is(cause, errClientDisconnect):
		return "client sent DISCONNECT"
	case errors.Is(cause, errKeepAlive):
		return "keep alive timeout"
	case errors.Is(cause, io.EOF):
		return "connection closed by the client without DISCONNECT"
	case reason != 0:
		return reason.String()
	case cause != nil:
		return cause.Error()
	}
	return "closed by the broker"
}
