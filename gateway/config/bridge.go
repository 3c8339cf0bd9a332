package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/linemq/linemq/broker/topic"
)

// Bridge is one uplink bridge (bridges[]): a connection from this gateway
// to a site or cloud broker that forwards local messages out and remote
// messages in, with a store-and-forward queue for QoS 1 messages while the
// remote is out of reach. See docs/bridge.md.
type Bridge struct {
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
	TLS BridgeTLS `yaml:"tls"`
	// KeepAlive towards the remote, whole seconds. Default 30s.
	KeepAlive Duration `yaml:"keepalive"`
	// SessionExpiry asked of the remote: how long it keeps the bridge's
	// subscriptions (and messages for the in rules) while the link is down,
	// whole seconds. Default 1h.
	SessionExpiry Duration `yaml:"session_expiry"`
	// ReconnectDelay is the longest wait between connection attempts (they
	// start at a quarter second and double). Default 30s.
	ReconnectDelay Duration `yaml:"reconnect_delay"`
	// Out are the local filters forwarded to the remote.
	Out []BridgeRule `yaml:"out"`
	// In are the remote filters forwarded to this broker.
	In []BridgeRule `yaml:"in"`
	// Queue bounds the store-and-forward queue of outbound QoS 1 messages.
	Queue BridgeQueue `yaml:"queue"`
	// DrainRate is how many queued messages a second are sent once the
	// remote is back (backlog only: messages arriving while connected are
	// not paced). Default 200; may be unlimited.
	DrainRate Limit `yaml:"drain_rate"`
	// MaxInflight bounds the QoS 1 messages sent and not yet acknowledged
	// by the remote (one per topic at a time). Default 32.
	MaxInflight Limit `yaml:"max_inflight"`
}

// BridgeTLS is a bridge's TLS towards its remote (bridges[].tls).
type BridgeTLS struct {
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
func (t *BridgeTLS) Set() bool { return *t != BridgeTLS{} }

// BridgeRule maps topics across a bridge (bridges[].out[], bridges[].in[]).
// A topic matching Filter is forwarded with Strip removed from its start
// and Prefix put in front: out, local topic -> remote topic; in, remote
// topic -> local topic.
type BridgeRule struct {
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

// BridgeQueue bounds a bridge's queue (bridges[].queue). When a bound is
// reached the oldest messages are dropped, and counted.
type BridgeQueue struct {
	// MaxBytes of queued messages (topic, payload, properties). Default
	// 64MiB.
	MaxBytes Size `yaml:"max_bytes"`
	// MaxAge of a queued message. Default 24h; may be unlimited.
	MaxAge Duration `yaml:"max_age"`
}

// Bridge defaults.
const (
	DefaultBridgeKeepAlive      = Duration(30 * time.Second)
	DefaultBridgeSessionExpiry  = Duration(time.Hour)
	DefaultBridgeReconnectDelay = Duration(30 * time.Second)
	DefaultBridgeDrainRate      = Limit(200)
	DefaultBridgeMaxInflight    = Limit(32)
	DefaultBridgeQueueMaxBytes  = Size(64 << 20)
	DefaultBridgeQueueMaxAge    = Duration(24 * time.Hour)
)

// WithDefaults returns b with its unset keys at their defaults; nodeID
// makes the default client id.
func (b Bridge) WithDefaults(nodeID string) Bridge {
	if b.Protocol == 0 {
		b.Protocol = 5
	}
	if b.ClientID == "" {
		b.ClientID = nodeID + "-" + b.Name
	}
	set := func(d *Duration, def Duration) {
		if *d == 0 {
			*d = def
		}
	}
	set(&b.KeepAlive, DefaultBridgeKeepAlive)
	set(&b.SessionExpiry, DefaultBridgeSessionExpiry)
	set(&b.ReconnectDelay, DefaultBridgeReconnectDelay)
	set(&b.Queue.MaxAge, DefaultBridgeQueueMaxAge)
	if b.DrainRate == 0 {
		b.DrainRate = DefaultBridgeDrainRate
	}
	if b.MaxInflight == 0 {
		b.MaxInflight = DefaultBridgeMaxInflight
	}
	if b.Queue.MaxBytes == 0 {
		b.Queue.MaxBytes = DefaultBridgeQueueMaxBytes
	}
	b.Out, b.In = rulesWithDefaults(b.Out), rulesWithDefaults(b.In)
	return b
}

func rulesWithDefaults(rs []BridgeRule) []BridgeRule {
	out := make([]BridgeRule, len(rs))
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
func (r *BridgeRule) Map(t string) string {
	return r.Prefix + strings.TrimPrefix(t, r.Strip)
}

// ValidateBridges checks the bridges section, naming each key and, for a
// file, its line. Validate calls it.
func (c *Config) ValidateBridges() error {
	v := validator{src: c.src}
	names := make(map[string]int)
	for i, b := range c.Bridges {
		key := fmt.Sprintf("bridges[%d]", i)
		switch {
		case b.Name == "":
			v.fail(key+".name", errors.New("required"))
		case strings.IndexFunc(b.Name, func(r rune) bool {
			return !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}) >= 0:
			v.fail(key+".name", fmt.Errorf("%q: letters, digits, - and _ only", b.Name))
		default:
			if j, dup := names[b.Name]; dup {
				v.fail(key+".name", fmt.Errorf("%q repeats bridges[%d]", b.Name, j))
			}
			names[b.Name] = i
		}
		if len(b.Addresses) == 0 {
			v.fail(key+".addresses", errors.New("required: at least one host:port"))
		}
		for j, a := range b.Addresses {
			host := a
			for _, s := range []string{"mqtt://", "tcp://", "tls://", "mqtts://", "ssl://"} {
				host = strings.TrimPrefix(host, s)
			}
			if strings.Contains(host, "://") {
				v.fail(fmt.Sprintf("%s.addresses[%d]", key, j), fmt.Errorf("%q: scheme must be mqtt:// or tls://", a))
				continue
			}
			v.addr(fmt.Sprintf("%s.addresses[%d]", key, j), host)
		}
		if b.Protocol != 0 && b.Protocol != 5 && b.Protocol != 311 {
			v.fail(key+".protocol", fmt.Errorf("%d: 5 or 311", b.Protocol))
		}
		if t := &b.TLS; t.Set() && (t.CertFile == "") != (t.KeyFile == "") {
			v.fail(key+".tls", errors.New("cert_file and key_file go together"))
		}
		v.seconds(key+".keepalive", b.KeepAlive, DefaultBridgeKeepAlive, maxUint16*Duration(time.Second))
		if b.KeepAlive < 0 {
			v.fail(key+".keepalive", errors.New("cannot be unlimited"))
		}
		v.seconds(key+".session_expiry", b.SessionExpiry, DefaultBridgeSessionExpiry, maxSessionExpiry)
		limit(&v, key+".reconnect_delay", b.ReconnectDelay, DefaultBridgeReconnectDelay, bounds[Duration]{Duration(100 * time.Millisecond), 0, false})
		limit(&v, key+".drain_rate", b.DrainRate, DefaultBridgeDrainRate, bounds[Limit]{1, 0, true})
		limit(&v, key+".max_inflight", b.MaxInflight, DefaultBridgeMaxInflight, bounds[Limit]{1, maxUint16, false})
		limit(&v, key+".queue.max_bytes", b.Queue.MaxBytes, DefaultBridgeQueueMaxBytes, bounds[Size]{1024, 0, false})
		limit(&v, key+".queue.max_age", b.Queue.MaxAge, DefaultBridgeQueueMaxAge, bounds[Duration]{Duration(time.Second), 0, true})
		if len(b.Out) == 0 && len(b.In) == 0 {
			v.fail(key, errors.New("no out or in rules: the bridge would forward nothing"))
		}
		for dir, rs := range map[string][]BridgeRule{"out": b.Out, "in": b.In} {
			for j, r := range rs {
				rk := fmt.Sprintf("%s.%s[%d]", key, dir, j)
				if err := topic.ValidateFilter([]byte(r.Filter)); err != nil || strings.HasPrefix(r.Filter, "$share/") {
					v.fail(rk+".filter", fmt.Errorf("%q is not a topic filter", r.Filter))
				}
				if strings.ContainsAny(r.Prefix+r.Strip, "+#") {
					v.fail(rk+".prefix", errors.New("prefix and strip cannot hold wildcards"))
				}
				if r.QoS != nil && (*r.QoS < 0 || *r.QoS > 1) {
					v.fail(rk+".qos", fmt.Errorf("%d: 0 or 1", *r.QoS))
				}
			}
		}
		// 3.1.1 has no No Local: a remote topic both sent to and subscribed
		// to would come straight back. Refuse the overlap (docs/bridge.md).
		if b.Protocol == 311 {
			for j, in := range b.In {
				for k, out := range b.Out {
					if filtersOverlap(in.Filter, out.Prefix+strings.TrimPrefix(out.Filter, out.Strip)) {
						v.fail(fmt.Sprintf("%s.in[%d].filter", key, j), fmt.Errorf("%q may match topics out[%d] sends to the remote; with protocol 311 (no No Local) they would loop: make them disjoint, or use protocol 5", in.Filter, k))
					}
				}
			}
		}
	}
	return errors.Join(v.errs...)
}

// filtersOverlap reports whether some topic may match both filters.
func filtersOverlap(a, b string) bool {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; ; i++ {
		switch {
		case i < len(as) && as[i] == "#", i < len(bs) && bs[i] == "#":
			return true
		case i == len(as) || i == len(bs):
			return len(as) == len(bs)
		case as[i] != "+" && bs[i] != "+" && as[i] != bs[i]:
			return false
		}
	}
}
