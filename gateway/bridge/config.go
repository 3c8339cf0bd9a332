package bridge

import (
	"strings"
	"time"

	"github.com/linemq/linemq/gateway/confval"
)

// The bridges section of linemq.yaml is the bridge's own: its schema and
// defaults are here; gateway/config reads it from the file and checks it
// (with the line of each key) before the gateway starts.

// Config is one uplink bridge (bridges[] in linemq.yaml): a connection from this gateway
// to a site or cloud broker that forwards local messages out and remote
// messages in, with a store-and-forward queue for QoS 1 messages while the
// remote is out of reach. See docs/bridge.md.
type Config struct {
	// Name identifies the bridge on the status page, in metrics and in the
	// queue's key in the database. Required, unique; letters, digits, -
	// and _.
	Name string `yaml:"name"`
	// Addresses of the remote broker, tried in order (failover on error):
	// host:port, or tls://host:port (mqtt:// is the plain default).
	Addresses []string `yaml:"addresses"`
	// Protocol is 5 (MQTT 5.0, the default) or 311 (3.1.1).
	Protocol int `yaml:"protocol"`
	// ClientID at the remote. Default: <node_id>-<name>.
	ClientID string `yaml:"client_id"`
	// Username and Password at the remote, if it wants them.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// TLS to the remote: any key set turns TLS on for every address.
	TLS TLS `yaml:"tls"`
	// KeepAlive towards the remote, whole seconds. Default 30s.
	KeepAlive confval.Duration `yaml:"keepalive"`
	// SessionExpiry asked of the remote: how long it keeps the bridge's
	// subscriptions (and messages for the in rules) while the link is down,
	// whole seconds. Default 1h.
	SessionExpiry confval.Duration `yaml:"session_expiry"`
	// ReconnectDelay is the longest wait between connection attempts (they
	// start at a quarter second and double). Default 30s.
	ReconnectDelay confval.Duration `yaml:"reconnect_delay"`
	// Out are the local filters forwarded to the remote.
	Out []Rule `yaml:"out"`
	// In are the remote filters forwarded to this broker.
	In []Rule `yaml:"in"`
	// Queue bounds the store-and-forward queue of outbound QoS 1 messages.
	Queue Queue `yaml:"queue"`
	// DrainRate is how many queued messages a second are sent once the
	// remote is back (backlog only: messages arriving while connected are
	// not paced). Default 200; may be unlimited.
	DrainRate confval.Limit `yaml:"drain_rate"`
	// MaxInflight bounds the QoS 1 messages sent and not yet acknowledged
	// by the remote (one per topic at a time). Default 32.
	MaxInflight confval.Limit `yaml:"max_inflight"`
}

// TLS is a bridge's TLS towards its remote (bridges[].tls).
type TLS struct {
	// CAFile holds the PEM certificates of the authorities that issued the
	// remote's certificate. Default: the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and key, for a remote
	// that wants one.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName checked in the remote's certificate. Default: the host of
	// the address dialled.
	ServerName string `yaml:"server_name"`
}

// Set reports whether any key of the section is.
func (t *TLS) Set() bool { return *t != TLS{} }

// Rule maps topics across a bridge (bridges[].out[], bridges[].in[]).
// A topic matching Filter is forwarded with Strip removed from its start
// and Prefix put in front: out, local topic -> remote topic; in, remote
// topic -> local topic.
type Rule struct {
	// Filter selects the topics: a local filter for out, a remote one for
	// in. Required; no $share.
	Filter string `yaml:"filter"`
	// Prefix is put in front of the forwarded topic ("site/gw1/").
	Prefix string `yaml:"prefix"`
	// Strip is removed from the start of the topic first, when it starts
	// with it.
	Strip string `yaml:"strip"`
	// QoS is the most the rule forwards with, 0 or 1 (default 1): a message
	// keeps its own QoS up to it. Out QoS 1 messages go through the queue.
	QoS *int `yaml:"qos"`
	// Retain forwards the retained flag as published (default true); false
	// forwards every message unretained.
	Retain *bool `yaml:"retain"`
}

// Queue bounds a bridge's queue (bridges[].queue). When a bound is
// reached the oldest messages are dropped, and counted.
type Queue struct {
	// MaxBytes of queued messages (topic, payload, properties). Default
	// 64MiB.
	MaxBytes confval.Size `yaml:"max_bytes"`
	// MaxAge of a queued message. Default 24h; may be unlimited.
	MaxAge confval.Duration `yaml:"max_age"`
}

// The defaults of a bridge's keys.
const (
	DefaultKeepAlive      = confval.Duration(30 * time.Second)
	DefaultSessionExpiry  = confval.Duration(time.Hour)
	DefaultReconnectDelay = confval.Duration(30 * time.Second)
	DefaultDrainRate      = confval.Limit(200)
	DefaultMaxInflight    = confval.Limit(32)
	DefaultQueueMaxBytes  = confval.Size(64 << 20)
	DefaultQueueMaxAge    = confval.Duration(24 * time.Hour)
)

// WithDefaults returns b with its unset keys at their defaults; nodeID
// makes the default client id.
func (b Config) WithDefaults(nodeID string) Config {
	if b.Protocol == 0 {
		b.Protocol = 5
	}
	if b.ClientID == "" {
		b.ClientID = nodeID + "-" + b.Name
	}
	set := func(d *confval.Duration, def confval.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	set(&b.KeepAlive, DefaultKeepAlive)
	set(&b.SessionExpiry, DefaultSessionExpiry)
	set(&b.ReconnectDelay, DefaultReconnectDelay)
	set(&b.Queue.MaxAge, DefaultQueueMaxAge)
	if b.DrainRate == 0 {
		b.DrainRate = DefaultDrainRate
	}
	if b.MaxInflight == 0 {
		b.MaxInflight = DefaultMaxInflight
	}
	if b.Queue.MaxBytes == 0 {
		b.Queue.MaxBytes = DefaultQueueMaxBytes
	}
	b.Out, b.In = rulesWithDefaults(b.Out), rulesWithDefaults(b.In)
	return b
}

func rulesWithDefaults(rs []Rule) []Rule {
	out := make([]Rule, len(rs))
	for i, r := range rs {
		if r.QoS == nil {
			r.QoS = new(1)
		}
		if r.Retain == nil {
			r.Retain = new(true)
		}
		out[i] = r
	}
	return out
}

// Map returns the topic t forwarded by r: Strip removed, Prefix added.
func (r *Rule) Map(t string) string {
	return r.Prefix + strings.TrimPrefix(t, r.Strip)
}
