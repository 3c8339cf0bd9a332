package config

import (
	"errors"
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/share"
)

// Limits of the MQTT protocol that Validate enforces.
const (
	maxPacketSize     = 268_435_460   // 1 + 4 + 268,435,455 (v5 section 2.1.4)
	maxUint16         = 65535         // two-byte integers: receive maximum, aliases, keep alive
	maxSessionExpiry  = 4_294_967_295 // four-byte integer, in seconds
	maxClientIDLength = 65535         // a UTF-8 string's length prefix is two bytes
)

// Validate reports every value that is out of range or inconsistent with
// another, each as an [*Error] naming its key path and, when the value came
// from a file or an override, where; several are joined. Unset (zero)
// fields stand for their defaults, which are valid. As a last line of
// defence it also runs broker.Options.Validate on [Config.BrokerOptions],
// so a Config that passes is one broker.New accepts.
func (c *Config) Validate() error {
	e := c.WithDefaults()
	v := validator{src: c.src}

	if strings.ContainsFunc(e.NodeID, func(r rune) bool { return r == '/' || unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		// It becomes part of etcd keys (nodes/<node-id>) in a cluster.
		v.fail("node_id", fmt.Errorf("%q must not contain \"/\", spaces or control characters", e.NodeID))
	}
	if _, ok := logLevels[e.LogLevel]; !ok {
		v.fail("log_level", fmt.Errorf("unknown level %q (valid: debug, info, warn, error)", e.LogLevel))
	}

	m := &e.MQTT
	v.addr("mqtt.listen", *m.Listen)
	v.intRange("mqtt.max_packet_size", m.MaxPacketSize, 0, maxPacketSize)
	if c.MQTT.ReceiveMaximum == 0 && c.src.has("mqtt.receive_maximum") {
		v.fail("mqtt.receive_maximum", errors.New("0 out of range (1..65535)"))
	} else {
		v.intRange("mqtt.receive_maximum", m.ReceiveMaximum, 1, maxUint16)
	}
	v.intRange("mqtt.topic_alias_maximum", *m.TopicAliasMaximum, 0, maxUint16)
	v.seconds("mqtt.max_keepalive", m.MaxKeepAlive, maxUint16)
	v.seconds("mqtt.max_session_expiry", m.MaxSessionExpiry, maxSessionExpiry)
	v.nonNegative("mqtt.max_queued_messages", m.MaxQueuedMessages)
	v.nonNegative("mqtt.max_pending_bytes", m.MaxPendingBytes)
	v.nonNegative("mqtt.max_queued_total", m.MaxQueuedTotal)
	v.intRange("mqtt.max_client_id_length", m.MaxClientIDLength, 0, maxClientIDLength)
	v.nonNegativeDuration("mqtt.connect_timeout", m.ConnectTimeout)
	v.nonNegativeDuration("mqtt.write_timeout", m.WriteTimeout)

	v.addr("http.listen", *e.HTTP.Listen)

	s := &e.SharedSubscriptions
	v.strategy("shared_subscriptions.strategy", s.Strategy)
	v.overload("shared_subscriptions.overload", s.Overload)
	first := make(map[string]int) // group name pattern -> index of its first entry
	for i, g := range c.SharedSubscriptions.Groups {
		// The raw entry, not e's: an unset strategy inherits the global
		// one, whose error is reported above.
		key := fmt.Sprintf("shared_subscriptions.groups[%d]", i)
		v.shareName(key+".name", g.Name)
		if j, dup := first[g.Name]; dup && g.Name != "" {
			v.fail(key+".name", fmt.Errorf("%q repeats groups[%d]; only the first entry that matches applies", g.Name, j))
		} else {
			first[g.Name] = i
		}
		if g.Strategy != "" {
			v.strategy(key+".strategy", g.Strategy)
		}
		v.overload(key+".overload", g.Overload)
		for j, p := range g.AllowedClients {
			v.pattern(fmt.Sprintf("%s.allowed_clients[%d]", key, j), p)
		}
		v.nonNegative(key+".min_members", g.MinMembers)
		v.nonNegative(key+".max_members", g.MaxMembers)
		if g.MaxMembers > 0 && g.MinMembers > g.MaxMembers {
			v.fail(key+".min_members", fmt.Errorf("%d exceeds max_members (%d)", g.MinMembers, g.MaxMembers))
		}
	}

	switch e.Storage.Sync {
	case "always", "batch", "none":
	default:
		v.fail("storage.sync", fmt.Errorf("unknown value %q (valid: always, batch, none)", e.Storage.Sync))
	}
	v.nonNegativeDuration("storage.batch_interval", e.Storage.BatchInterval)

	if len(v.errs) == 0 {
		bo := c.BrokerOptions()
		if err := bo.Validate(); err != nil {
			// A rule of the broker's that the checks above do not know.
			v.errs = append(v.errs, &Error{Err: err})
		}
	}
	return errors.Join(v.errs...)
}

// validator collects errors located through src.
type validator struct {
	src  *source
	errs []error
}

func (v *validator) fail(key string, err error) {
	p, _ := v.src.lookup(key)
	v.errs = append(v.errs, &Error{File: p.file, Line: p.line, Key: key, Err: err})
}

func (v *validator) intRange(key string, n, lo, hi int) {
	if n < lo || n > hi {
		v.fail(key, fmt.Errorf("%d out of range (%d..%d)", n, lo, hi))
	}
}

func (v *validator) nonNegative(key string, n int) {
	if n < 0 {
		v.fail(key, fmt.Errorf("must not be negative (got %d)", n))
	}
}

func (v *validator) nonNegativeDuration(key string, d time.Duration) {
	if d < 0 {
		v.fail(key, fmt.Errorf("must not be negative (got %v)", d))
	}
}

// seconds checks a duration the protocol carries in whole seconds: the
// broker would round 1500ms down to 1s, and 500ms to 0, which means "no
// limit".
func (v *validator) seconds(key string, d time.Duration, hi int64) {
	switch {
	case d < 0 || d > time.Duration(hi)*time.Second:
		v.fail(key, fmt.Errorf("%v out of range (0s..%ds)", d, hi))
	case d%time.Second != 0:
		v.fail(key, fmt.Errorf("%v is not a whole number of seconds", d))
	}
}

// addr checks a listen address; empty disables the listener.
func (v *validator) addr(key, a string) {
	if a == "" {
		return
	}
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		msg := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			msg = ae.Err
		}
		v.fail(key, fmt.Errorf("invalid address %q: %s (write it as host:port, or :port for all interfaces)", a, msg))
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		v.fail(key, fmt.Errorf("invalid port %q in %q (need 0..65535)", port, a))
	}
}

func (v *validator) overload(key, s string) {
	switch s {
	case "", broker.OverloadBackpressure, broker.OverloadDropOldest:
	default:
		v.fail(key, fmt.Errorf("unknown value %q (valid: %s, %s)", s, broker.OverloadBackpressure, broker.OverloadDropOldest))
	}
}

func (v *validator) strategy(key, s string) {
	if _, err := share.ParseStrategy(s); err != nil {
		// share's message carries its package prefix, which means nothing
		// to someone editing a YAML file.
		v.fail(key, &plainError{strings.TrimPrefix(err.Error(), "share: "), err})
	}
}

// shareName checks a group name pattern: a valid glob that could match a
// share name, which cannot contain /, + or # [MQTT-4.8.2-2].
func (v *validator) shareName(key, name string) {
	switch {
	case name == "":
		v.fail(key, errors.New("required"))
	case strings.ContainsAny(name, "/+#"):
		v.fail(key, fmt.Errorf("%q can never match: share names cannot contain \"/\", \"+\" or \"#\"", name))
	default:
		v.pattern(key, name)
	}
}

func (v *validator) pattern(key, p string) {
	if p == "" {
		v.fail(key, errors.New("empty pattern"))
		return
	}
	if _, err := path.Match(p, ""); err != nil {
		v.fail(key, fmt.Errorf("bad pattern %q: %w", p, err))
	}
}

// plainError is an error with its own message that still unwraps to the
// original, so errors.Is(err, share.ErrUnknownStrategy) holds.
type plainError struct {
	msg string
	err error
}

func (e *plainError) Error() string { return e.msg }
func (e *plainError) Unwrap() error { return e.err }
