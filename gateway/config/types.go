package config

import (
	"fmt"
	"log/slog"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/share"
	"github.com/linemq/linemq/gateway/confval"
	"github.com/linemq/linemq/storage/bolt"
)

// The value types every section may use live in gateway/confval, so that
// the parts that own a section (gateway/bridge) need not import this
// package; they keep their names here.
type (
	Limit    = confval.Limit
	Size     = confval.Size
	Duration = confval.Duration
)

// Unlimited and the binary units, as in gateway/confval.
const (
	Unlimited = confval.Unlimited
	KiB       = confval.KiB
	MiB       = confval.MiB
	GiB       = confval.GiB
)

// The types below are the values of the configuration that are more than a
// plain YAML string, integer or boolean. Each reads its YAML node in
// UnmarshalYAML and says what is wrong with a bad value; the walker
// (walk.go) adds where, and goes on, so that every problem in a file is
// reported at once.

// LogLevel is log_level: debug, info, warn or error. Empty means the
// default, info.
type LogLevel string

// logLevels are the valid log levels.
var logLevels = map[LogLevel]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// UnmarshalYAML reads a level name.
func (l *LogLevel) UnmarshalYAML(n *yaml.Node) error { return decodeWord(n, l, LogLevel.check) }

func (l LogLevel) check() error {
	if _, ok := logLevels[l]; !ok && l != "" {
		return fmt.Errorf("unknown level %q (valid: debug, info, warn, error)", string(l))
	}
	return nil
}

// Level returns l as a slog level: info when l is empty or not a level.
func (l LogLevel) Level() slog.Level {
	if v, ok := logLevels[l]; ok {
		return v
	}
	return slog.LevelInfo
}

// LogFormat is log_format: text (slog's key=value lines, the default) or
// json (one JSON object a line, for log collectors). Empty means text.
type LogFormat string

// The log formats.
const (
	LogText LogFormat = "text"
	LogJSON LogFormat = "json"
)

// UnmarshalYAML reads a format name.
func (f *LogFormat) UnmarshalYAML(n *yaml.Node) error { return decodeWord(n, f, LogFormat.check) }

func (f LogFormat) check() error {
	switch f {
	case "", LogText, LogJSON:
		return nil
	}
	return fmt.Errorf("unknown format %q (valid: %s, %s)", string(f), LogText, LogJSON)
}

// Strategy is the name of a share group strategy (see share.Strategy):
// round_robin, random, sticky, hash_clientid, hash_topic or prefer_local.
// Empty means the default: round_robin for the section, the section's
// strategy for a group.
type Strategy string

// UnmarshalYAML reads a strategy name.
func (s *Strategy) UnmarshalYAML(n *yaml.Node) error { return decodeWord(n, s, Strategy.check) }

func (s Strategy) check() error {
	if s == "" {
		return nil
	}
	if _, err := share.ParseStrategy(string(s)); err != nil {
		// share's message carries its package prefix, which means nothing
		// to someone editing a YAML file.
		return &plainError{strings.TrimPrefix(err.Error(), "share: "), err}
	}
	return nil
}

// Overload is what a share group does when its members cannot keep up:
// backpressure or drop_oldest (see broker.ShareOptions). Empty means the
// default: backpressure for the section, the section's mode for a group.
type Overload string

// UnmarshalYAML reads an overload mode.
func (o *Overload) UnmarshalYAML(n *yaml.Node) error { return decodeWord(n, o, Overload.check) }

func (o Overload) check() error {
	switch o {
	case "", broker.OverloadBackpressure, broker.OverloadDropOldest:
		return nil
	}
	return fmt.Errorf("unknown value %q (valid: %s, %s)", string(o), broker.OverloadBackpressure, broker.OverloadDropOldest)
}

// DeniedReason is mqtt.denied_subscription_reason.
type DeniedReason string

// The values of DeniedReason; the zero value is not_authorized.
const (
	DeniedNotAuthorized    DeniedReason = "not_authorized"
	DeniedUnspecifiedError DeniedReason = "unspecified_error"
)

// UnmarshalYAML reads not_authorized or unspecified_error.
func (d *DeniedReason) UnmarshalYAML(n *yaml.Node) error { return decodeWord(n, d, DeniedReason.check) }

func (d DeniedReason) check() error {
	switch d {
	case "", DeniedNotAuthorized, DeniedUnspecifiedError:
		return nil
	}
	return fmt.Errorf("unknown value %q (valid: %s, %s)", string(d), DeniedNotAuthorized, DeniedUnspecifiedError)
}

// code is the reason code d stands for.
func (d DeniedReason) code() packet.ReasonCode {
	if d == DeniedUnspecifiedError {
		return packet.UnspecifiedError
	}
	return packet.NotAuthorized
}

// HTTPLogin is http.login: whether the status page asks for a login.
type HTTPLogin string

// The values of HTTPLogin; the zero value is "required with a password
// file, off without".
const (
	HTTPLoginRequired HTTPLogin = "required"
	HTTPLoginOff      HTTPLogin = "off"
)

// UnmarshalYAML reads required or off.
func (l *HTTPLogin) UnmarshalYAML(n *yaml.Node) error { return decodeWord(n, l, HTTPLogin.check) }

func (l HTTPLogin) check() error {
	switch l {
	case "", HTTPLoginRequired, HTTPLoginOff:
		return nil
	}
	return fmt.Errorf("unknown value %q (valid: %s, %s)", string(l), HTTPLoginRequired, HTTPLoginOff)
}

// SyncMode is storage.sync, a bolt.SyncMode: always, batch (the default,
// and the zero value) or none. It is a type of its own only to give
// bolt.SyncMode an UnmarshalYAML; convert it with bolt.SyncMode(m).
type SyncMode bolt.SyncMode

// UnmarshalYAML reads a mode name with bolt.ParseSyncMode.
func (m *SyncMode) UnmarshalYAML(n *yaml.Node) error {
	return confval.Scalar(n, "a sync mode", func(s string) error {
		v, err := parseSyncMode(s)
		if err == nil {
			*m = v
		}
		return err
	})
}

func parseSyncMode(s string) (SyncMode, error) {
	v, err := bolt.ParseSyncMode(s)
	if err != nil {
		return 0, &plainError{strings.TrimPrefix(err.Error(), "storage: "), err}
	}
	return SyncMode(v), nil
}

// check reports a value that is not a mode (possible only in code).
func (m SyncMode) check() error {
	_, err := parseSyncMode(m.String())
	return err
}

// String returns the mode's configuration name.
func (m SyncMode) String() string { return bolt.SyncMode(m).String() }

// decodeWord reads the scalar n into a word-valued type, checked by check.
func decodeWord[T ~string](n *yaml.Node, out *T, check func(T) error) error {
	return confval.Scalar(n, "a word", func(s string) error {
		if err := check(T(s)); err != nil {
			return err
		}
		*out = T(s)
		return nil
	})
}

// plainError is an error with its own message that still unwraps to the
// original, so errors.Is(err, share.ErrUnknownStrategy) holds.
type plainError struct {
	msg string
	err error
}

func (e *plainError) Error() string { return e.msg }
func (e *plainError) Unwrap() error { return e.err }
