package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/share"
	"github.com/linemq/linemq/storage/bolt"
)

// The types below are the values of the configuration that are more than a
// plain YAML string, integer or boolean. Each reads its YAML node in
// UnmarshalYAML and says what is wrong with a bad value; the walker
// (walk.go) adds where, and goes on, so that every problem in a file is
// reported at once.

// Unlimited is the value of a [Limit], [Size] or [Duration] written
// "unlimited" in a file: the limit is switched off. In code any negative
// value means the same, as in [broker.Options]. Only some keys accept it;
// Validate refuses it for the others.
const Unlimited = -1

// unlimitedWord is how Unlimited is written.
const unlimitedWord = "unlimited"

// Limit is a limit on a count (messages, topic levels, members): a whole
// number, or Unlimited. The zero value stands for the key's default; writing
// 0 in a file is refused by Validate where a zero limit would make no sense.
type Limit int

// UnmarshalYAML reads a decimal whole number or "unlimited".
func (l *Limit) UnmarshalYAML(n *yaml.Node) error {
	return decodeScalar(n, "a whole number", func(s string) error {
		if s == unlimitedWord {
			*l = Unlimited
			return nil
		}
		v, err := parseCount(s, s, "a whole number")
		if err == nil {
			*l = Limit(v)
		}
		return err
	})
}

// String returns the number, or "unlimited" for a negative value.
func (l Limit) String() string {
	if l < 0 {
		return unlimitedWord
	}
	return strconv.Itoa(int(l))
}

// Size is a limit in bytes: a whole number of bytes, optionally with a
// binary unit (64KiB, 1MiB, 2GiB), or Unlimited. The zero value stands for
// the key's default. It is an int, as the broker's sizes are: under 2 GiB
// on 32-bit ARM.
type Size int

// Binary units of a Size.
const (
	KiB Size = 1 << (10 * (iota + 1))
	MiB
	GiB
)

// sizeUnits are the units a Size may be written with, largest first.
var sizeUnits = []struct {
	name string
	n    Size
}{{"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}}

// UnmarshalYAML reads a number of bytes, with or without a unit, or
// "unlimited".
func (z *Size) UnmarshalYAML(n *yaml.Node) error {
	return decodeScalar(n, "a size", func(s string) error {
		v, err := parseSize(s)
		if err == nil {
			*z = v
		}
		return err
	})
}

func parseSize(s string) (Size, error) {
	if s == unlimitedWord {
		return Unlimited, nil
	}
	num, mult := s, Size(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(s, u.name); ok {
			num, mult = rest, u.n
			break
		}
	}
	v, err := parseCount(num, s, `a size (write a number of bytes, or one with KiB, MiB or GiB: "64KiB")`)
	if err != nil {
		return 0, err
	}
	if v > math.MaxInt/int(mult) {
		return 0, fmt.Errorf("%s is too large", s)
	}
	return Size(v) * mult, nil
}

// String returns the size with the largest unit that divides it exactly,
// or "unlimited" for a negative value.
func (z Size) String() string {
	if z < 0 {
		return unlimitedWord
	}
	for _, u := range sizeUnits {
		if z >= u.n && z%u.n == 0 {
			return strconv.Itoa(int(z/u.n)) + u.name
		}
	}
	return strconv.Itoa(int(z))
}

// Duration is a time limit: a Go duration string ("500ms", "10s", "1h30m"),
// or Unlimited. The zero value stands for the key's default.
type Duration time.Duration

// UnmarshalYAML reads a duration string or "unlimited".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	return decodeScalar(n, "a duration", func(s string) error {
		if s == unlimitedWord {
			*d = Unlimited
			return nil
		}
		v, err := time.ParseDuration(s)
		switch {
		case err != nil:
			return fmt.Errorf(`%q is not a duration (write it like "10s", "500ms" or "1h30m")`, s)
		case v < 0:
			return fmt.Errorf("must not be negative (got %v)", v)
		}
		*d = Duration(v)
		return nil
	})
}

// String formats d as time.Duration does, or "unlimited" for a negative
// value.
func (d Duration) String() string {
	if d < 0 {
		return unlimitedWord
	}
	return time.Duration(d).String()
}

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
	return decodeScalar(n, "a sync mode", func(s string) error {
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

// parseCount parses a non-negative decimal whole number that fits an int
// (32 bits on ARMv7: a larger value is refused, not wrapped). text is the
// value as written, unit included, and what names the expected value, for
// the error.
func parseCount(num, text, what string) (int, error) {
	v, err := strconv.ParseInt(num, 10, strconv.IntSize)
	switch {
	case err == nil && v >= 0:
		return int(v), nil
	case strings.HasPrefix(num, "-") && (err == nil || errors.Is(err, strconv.ErrRange)):
		return 0, fmt.Errorf("must not be negative (got %s)", text)
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("%s is too large", text)
	}
	return 0, fmt.Errorf("%q is not %s", text, what)
}

// decodeScalar runs parse on the text of the scalar n.
func decodeScalar(n *yaml.Node, what string, parse func(string) error) error {
	if n.Kind != yaml.ScalarNode {
		return &mismatch{what, kindName(n)}
	}
	return parse(n.Value)
}

// decodeWord reads the scalar n into a word-valued type, checked by check.
func decodeWord[T ~string](n *yaml.Node, out *T, check func(T) error) error {
	return decodeScalar(n, "a word", func(s string) error {
		if err := check(T(s)); err != nil {
			return err
		}
		*out = T(s)
		return nil
	})
}

// kindName describes a node in an error message.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

// plainError is an error with its own message that still unwraps to the
// original, so errors.Is(err, share.ErrUnknownStrategy) holds.
type plainError struct {
	msg string
	err error
}

func (e *plainError) Error() string { return e.msg }
func (e *plainError) Unwrap() error { return e.err }
