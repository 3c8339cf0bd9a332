// Package zaplog turns a *slog.Logger into the *zap.Logger that etcd's
// client and embedded server insist on, so the gateway keeps one logger
// (log/slog) and etcd's lines land in it with their fields intact.
//
// The adapter is deliberately small: levels map one to one (zap's DPanic,
// Panic and Fatal become slog errors; zap still panics or exits for those
// itself, as it would with any core), fields are encoded with zap's own map
// encoder, and a nil slog logger gives zap.NewNop.
package zaplog

import (
	"context"
	"log/slog"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a zap logger writing to l, or a no-op logger when l is nil.
// name, if not empty, is added to every record as "component".
func New(l *slog.Logger, name string) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	if name != "" {
		l = l.With("component", name)
	}
	return zap.New(&core{l: l})
}

// core is a zapcore.Core over a slog.Logger. It holds no mutable state:
// With returns a new core, which is what zap expects.
type core struct {
	l *slog.Logger
}

func level(z zapcore.Level) slog.Level {
	switch {
	case z <= zapcore.DebugLevel:
		return slog.LevelDebug
	case z == zapcore.InfoLevel:
		return slog.LevelInfo
	case z == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (c *core) Enabled(z zapcore.Level) bool {
	return c.l.Enabled(context.Background(), level(z))
}

func (c *core) With(fields []zapcore.Field) zapcore.Core {
	return &core{l: c.l.With(attrs(fields)...)}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *core) Write(e zapcore.Entry, fields []zapcore.Field) error {
	args := attrs(fields)
	if e.LoggerName != "" {
		args = append(args, slog.String("logger", e.LoggerName))
	}
	lvl := level(e.Level)
	if lvl > slog.LevelInfo && closing(fields) {
		// etcd reports its own listeners and servers closing as errors
		// ("setting up serving from embedded etcd failed ... use of
		// closed network connection", dozens per stop): a normal stop
		// logs no ERROR, so these go to the debug log.
		lvl = slog.LevelDebug
	}
	c.l.Log(context.Background(), lvl, e.Message, args...)
	return nil
}

// closing reports whether an error field is only a server or listener
// being closed.
func closing(fields []zapcore.Field) bool {
	for _, f := range fields {
		if f.Type != zapcore.ErrorType {
			continue
		}
		err, ok := f.Interface.(error)
		if !ok || err == nil {
			continue
		}
		// The errors of a server or listener being closed on purpose.
		for _, t := range [...]string{"use of closed network connection", "mux: server closed", "http: Server closed", "grpc: the server has been stopped"} {
			if strings.Contains(err.Error(), t) {
				return true
			}
		}
	}
	return false
}

func (c *core) Sync() error { return nil }

// attrs encodes zap fields with zap's map encoder, which knows every field
// type (durations, errors, stringers, objects), one field at a time so the
// order of the fields survives, and hands the results to slog as values.
func attrs(fields []zapcore.Field) []any {
	if len(fields) == 0 {
		return nil
	}
	out := make([]any, 0, len(fields))
	for _, f := range fields {
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		for k, v := range enc.Fields { // one key, or none for a skipped field
			out = append(out, slog.Any(k, v))
		}
	}
	return out
}
