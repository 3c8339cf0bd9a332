package topic

import (
	"errors"
	"strings"
)

// Validation errors. They are package-level values so that returning one does
// not allocate; compare with errors.Is.
var (
	// ErrEmptyName is returned for a zero-length topic name [MQTT-4.7.3-1].
	ErrEmptyName = errors.New("topic: empty topic name")
	// ErrWildcardInName is returned for a topic name that contains '+' or
	// '#' [MQTT-4.7.1-1] (5.0: [MQTT-4.7.0-1]).
	ErrWildcardInName = errors.New("topic: wildcard in topic name")
	// ErrEmptyFilter is returned for a zero-length topic filter
	// [MQTT-4.7.3-1].
	ErrEmptyFilter = errors.New("topic: empty topic filter")
	// ErrBadMultiLevel is returned for a filter with a '#' that is not alone
	// in the last level [MQTT-4.7.1-2] (5.0: [MQTT-4.7.1-1]).
	ErrBadMultiLevel = errors.New("topic: '#' must be alone in the last level of a filter")
	// ErrBadSingleLevel is returned for a filter with a '+' that does not
	// occupy a whole level [MQTT-4.7.1-3] (5.0: [MQTT-4.7.1-2]).
	ErrBadSingleLevel = errors.New("topic: '+' must be alone in its level")
	// ErrBadShare is returned for a "$share/" filter that is not
	// "$share/<group>/<filter>" with a non-empty group free of '/', '+' and
	// '#' and a valid filter [MQTT-4.8.2-1] [MQTT-4.8.2-2]. When the filter
	// part is what is wrong, the error also matches that filter's error
	// under errors.Is.
	ErrBadShare = errors.New("topic: malformed shared subscription")
	// ErrTooLong is returned for a name or filter longer than 65535 bytes
	// [MQTT-4.7.3-3]. The decoder cannot produce one, but configuration can.
	ErrTooLong = errors.New("topic: longer than 65535 bytes")
	// ErrNullChar is returned for a name or filter that contains U+0000
	// [MQTT-4.7.3-2]. The decoder rejects these already; configuration and
	// bridges do not go through it.
	ErrNullChar = errors.New("topic: contains U+0000")
)

// shareError is ErrBadShare caused by a bad filter part. It matches both
// under errors.Is, and its message does not repeat the package prefix.
type shareError struct{ err error }

func (e *shareError) Error() string {
	return ErrBadShare.Error() + ": " + strings.TrimPrefix(e.err.Error(), "topic: ")
}

func (e *shareError) Unwrap() []error { return []error{ErrBadShare, e.err} }
