// Package config is linemq's configuration: the YAML schema of
// /etc/linemq/linemq.yaml as plain structs, its defaults, and the checks
// that run before anything starts.
//
// # Zero values and defaults
//
// Every field's zero value means its default, so Config{} is a working
// standalone gateway. Where the zero value is itself a meaningful setting
// distinct from the default (an empty listen address disables the listener,
// topic_alias_maximum: 0 refuses topic aliases, false for a switch that
// defaults to true), the field is a pointer and nil means the default.
// [Default] returns a Config with every default written out, and
// [Config.WithDefaults] fills in the unset fields of another.
//
// # Files
//
// [Parse] and [Load] read a file on top of [Default]: keys left out keep
// their defaults, and a key with no value (`listen:`) does too. Unknown keys,
// repeated keys and values of the wrong type are errors that name the key
// path and its line, in the form editors and CI logs understand:
//
//	linemq.yaml:7: unknown key "mqtt.recieve_maximum"
//
// Reading a file does not check ranges and cross-field rules: call
// [Config.Validate] after applying command-line overrides ([Config.Override]),
// so that its errors say whether a bad value came from the file (with its
// line) or from a flag.
package config

import (
	"log/slog"
	"os"
	"time"

	"github.com/linemq/linemq/broker"
)

// Config is the whole configuration of one linemq node.
type Config struct {
	// NodeID names this node in logs, on the status page and, in a cluster,
	// to its peers. Default: the host name.
	NodeID string `yaml:"node_id"`

	// DataDir holds persistent state (sessions, retained messages, bridge
	// queues). It is created at start if missing. Default "./data"; the
	// appliance uses /var/lib/linemq.
	DataDir string `yaml:"data_dir"`

	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `yaml:"log_level"`

	// MQTT configures the MQTT listener and protocol limits.
	MQTT MQTT `yaml:"mqtt"`

	// HTTP configures the status page and API listener.
	HTTP HTTP `yaml:"http"`

	// SharedSubscriptions configures share groups ($share/<name>/<filter>).
	SharedSubscriptions SharedSubscriptions `yaml:"shared_subscriptions"`

	// Storage configures how persistent state is written to DataDir.
	Storage Storage `yaml:"storage"`

	// src records where each value came from (file and line, or a flag),
	// for error messages. Nil for a Config built in code.
	src *source
}

// MQTT configures the MQTT listener and the limits the broker enforces and
// advertises to clients. See [broker.Options] for the semantics of each.
type MQTT struct {
	// Listen is the TCP address of the MQTT listener, host:port. Nil means
	// the default ":1883"; an empty string disables the listener.
	Listen *string `yaml:"listen"`

	// MaxPacketSize is the largest packet accepted from a client, in bytes,
	// 0..268435460 (0: default 1 MiB).
	MaxPacketSize int `yaml:"max_packet_size"`

	// ReceiveMaximum is how many unacknowledged QoS 1/2 publishes a client
	// may have towards the broker, 1..65535. Unset (0) means 1024; writing 0
	// in a file is an error, as MQTT has no receive maximum of 0.
	ReceiveMaximum int `yaml:"receive_maximum"`

	// TopicAliasMaximum is the highest topic alias a client may use,
	// 0..65535; 0 refuses topic aliases. Nil means 1024.
	TopicAliasMaximum *int `yaml:"topic_alias_maximum"`

	// MaxKeepAlive caps the keep alive clients ask for, in whole seconds up
	// to 65535s; 0 for no cap (the default).
	MaxKeepAlive time.Duration `yaml:"max_keepalive"`

	// MaxSessionExpiry caps the session expiry interval clients ask for, in
	// whole seconds; 0 for no cap (the default).
	MaxSessionExpiry time.Duration `yaml:"max_session_expiry"`

	// MaxQueuedMessages bounds each session's queue (0: default 1000).
	MaxQueuedMessages int `yaml:"max_queued_messages"`

	// MaxQueuedTotal bounds the messages queued in all sessions together
	// (0: no bound beyond max_queued_messages per session).
	MaxQueuedTotal int `yaml:"max_queued_total"`

	// QueueQoS0Messages queues QoS 0 messages for offline persistent
	// sessions too (in memory only). Default false: they are dropped.
	QueueQoS0Messages bool `yaml:"queue_qos0_messages"`

	// MaxPendingBytes bounds the bytes waiting to be written to one client
	// (0: default 1 MiB).
	MaxPendingBytes int `yaml:"max_pending_bytes"`

	// MaxClientIDLength is the longest client identifier accepted (0:
	// default 256).
	MaxClientIDLength int `yaml:"max_client_id_length"`

	// ConnectTimeout is how long a new connection may take to send CONNECT
	// (0: default 10s).
	ConnectTimeout time.Duration `yaml:"connect_timeout"`

	// WriteTimeout is how long one write to a client may block before the
	// connection is dropped (0: default 30s).
	WriteTimeout time.Duration `yaml:"write_timeout"`

	// RetainAvailable allows retained messages. Nil means true.
	RetainAvailable *bool `yaml:"retain_available"`

	// WildcardSubscriptions allows filters with + and #. Nil means true.
	WildcardSubscriptions *bool `yaml:"wildcard_subscriptions"`

	// SubscriptionIdentifiers allows v5 subscription identifiers. Nil means
	// true.
	SubscriptionIdentifiers *bool `yaml:"subscription_identifiers"`

	// SharedSubscriptions allows $share filters. Nil means true.
	SharedSubscriptions *bool `yaml:"shared_subscriptions"`
}

// HTTP configures the HTTP listener of the status page and API.
type HTTP struct {
	// Listen is the TCP address, host:port. Nil means the default ":8080";
	// an empty string disables the listener.
	Listen *string `yaml:"listen"`
}

// SharedSubscriptions configures share groups.
type SharedSubscriptions struct {
	// Strategy is how groups no entry of Groups matches pick a member:
	// round_robin (the default), random, sticky, hash_clientid, hash_topic
	// or prefer_local.
	Strategy string `yaml:"strategy"`

	// Overload is what a group does when its workers cannot keep up:
	// backpressure (the default: publishers' acknowledgements are held
	// while a member's queue is full, so nothing acknowledged is dropped) or
	// drop_oldest (the oldest queued message goes, counted).
	Overload string `yaml:"overload"`

	// Groups are per-group policies. A group takes the first entry whose
	// Name pattern matches its share name.
	Groups []ShareGroup `yaml:"groups"`
}

// ShareGroup is the policy of the share groups whose name matches Name. It
// is the contract that keeps, say, a historian needing the complete stream
// out of a worker pool. See [broker.GroupPolicy].
type ShareGroup struct {
	// Name is a share name or a glob pattern of them (path.Match syntax:
	// *, ?, [a-z]). Required.
	Name string `yaml:"name"`

	// Strategy overrides SharedSubscriptions.Strategy for these groups.
	Strategy string `yaml:"strategy"`

	// Overload overrides SharedSubscriptions.Overload for these groups.
	Overload string `yaml:"overload"`

	// SkipFullMembers passes over members whose send window is full while
	// another member has room. Nil means true; false keeps strict rotation.
	SkipFullMembers *bool `yaml:"skip_full_members"`

	// RedispatchOnDisconnect hands a member's queued and unacknowledged
	// messages to the other members as soon as its connection breaks,
	// rather than when its session ends.
	RedispatchOnDisconnect bool `yaml:"redispatch_on_disconnect"`

	// AllowedClients are client id glob patterns; when set, no other client
	// may join these groups.
	AllowedClients []string `yaml:"allowed_clients"`

	// MinMembers marks a group degraded while it has fewer members.
	MinMembers int `yaml:"min_members"`

	// MaxMembers refuses members beyond it; 0 for no limit.
	MaxMembers int `yaml:"max_members"`
}

// Storage configures how persistent state is written.
type Storage struct {
	// Sync is when writes reach the disk: always (every write is synced
	// before it is acknowledged), batch (writes are grouped and synced every
	// BatchInterval; the default) or none (the OS decides: fast, and loses
	// recent writes on power loss).
	Sync string `yaml:"sync"`

	// BatchInterval is the longest a write waits for its batch to be synced
	// when Sync is batch (0: default 10ms).
	BatchInterval time.Duration `yaml:"batch_interval"`
}

// Defaults that have no counterpart in package broker.
const (
	DefaultDataDir       = "./data"
	DefaultLogLevel      = "info"
	DefaultMQTTListen    = ":1883"
	DefaultHTTPListen    = ":8080"
	DefaultStrategy      = "round_robin"
	DefaultSync          = "batch"
	DefaultBatchInterval = 10 * time.Millisecond
)

// Default returns a Config with every field set to its default. Each call
// returns new pointers, so callers may change the result freely.
func Default() *Config {
	return &Config{
		NodeID:   defaultNodeID(),
		DataDir:  DefaultDataDir,
		LogLevel: DefaultLogLevel,
		MQTT: MQTT{
			Listen:                  new(DefaultMQTTListen),
			MaxPacketSize:           broker.DefaultMaxPacketSize,
			ReceiveMaximum:          broker.DefaultReceiveMaximum,
			TopicAliasMaximum:       new(broker.DefaultTopicAliasMaximum),
			MaxQueuedMessages:       broker.DefaultMaxQueuedMessages,
			MaxPendingBytes:         broker.DefaultMaxPendingBytes,
			MaxClientIDLength:       broker.DefaultMaxClientIDLength,
			ConnectTimeout:          broker.DefaultConnectTimeout,
			WriteTimeout:            broker.DefaultWriteTimeout,
			RetainAvailable:         new(true),
			WildcardSubscriptions:   new(true),
			SubscriptionIdentifiers: new(true),
			SharedSubscriptions:     new(true),
		},
		HTTP:                HTTP{Listen: new(DefaultHTTPListen)},
		SharedSubscriptions: SharedSubscriptions{Strategy: DefaultStrategy, Overload: broker.OverloadBackpressure},
		Storage:             Storage{Sync: DefaultSync, BatchInterval: DefaultBatchInterval},
	}
}

// defaultNodeID is the host name, or "linemq" on the odd system without one.
func defaultNodeID() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "linemq"
}

// WithDefaults returns a copy of c with every unset field set to its
// default, so that readers need not know which zero means what. The copy
// has its own Groups slice; other slices and non-nil pointers are shared
// with c. It keeps c's record of where values came from.
func (c *Config) WithDefaults() *Config {
	d := Default()
	o := *c
	setString(&o.NodeID, d.NodeID)
	setString(&o.DataDir, d.DataDir)
	setString(&o.LogLevel, d.LogLevel)

	m, dm := &o.MQTT, &d.MQTT
	setPtr(&m.Listen, dm.Listen)
	setInt(&m.MaxPacketSize, dm.MaxPacketSize)
	setInt(&m.ReceiveMaximum, dm.ReceiveMaximum)
	setPtr(&m.TopicAliasMaximum, dm.TopicAliasMaximum)
	setInt(&m.MaxQueuedMessages, dm.MaxQueuedMessages)
	setInt(&m.MaxPendingBytes, dm.MaxPendingBytes)
	setInt(&m.MaxClientIDLength, dm.MaxClientIDLength)
	setDuration(&m.ConnectTimeout, dm.ConnectTimeout)
	setDuration(&m.WriteTimeout, dm.WriteTimeout)
	setPtr(&m.RetainAvailable, dm.RetainAvailable)
	setPtr(&m.WildcardSubscriptions, dm.WildcardSubscriptions)
	setPtr(&m.SubscriptionIdentifiers, dm.SubscriptionIdentifiers)
	setPtr(&m.SharedSubscriptions, dm.SharedSubscriptions)

	setPtr(&o.HTTP.Listen, d.HTTP.Listen)

	s := &o.SharedSubscriptions
	setString(&s.Strategy, d.SharedSubscriptions.Strategy)
	setString(&s.Overload, d.SharedSubscriptions.Overload)
	if s.Groups != nil {
		s.Groups = append([]ShareGroup(nil), s.Groups...)
		for i := range s.Groups {
			g := &s.Groups[i]
			setString(&g.Strategy, s.Strategy)
			setPtr(&g.SkipFullMembers, new(true))
		}
	}

	setString(&o.Storage.Sync, d.Storage.Sync)
	setDuration(&o.Storage.BatchInterval, d.Storage.BatchInterval)
	return &o
}

func setString(p *string, d string) {
	if *p == "" {
		*p = d
	}
}

func setInt(p *int, d int) {
	if *p == 0 {
		*p = d
	}
}

func setDuration(p *time.Duration, d time.Duration) {
	if *p == 0 {
		*p = d
	}
}

func setPtr[T any](p **T, d *T) {
	if *p == nil {
		*p = d
	}
}

// Level returns LogLevel as a slog level; info when it is unset or not a
// level (Validate reports the latter).
func (c *Config) Level() slog.Level {
	if l, ok := logLevels[c.LogLevel]; ok {
		return l
	}
	return slog.LevelInfo
}

// logLevels are the valid log_level values.
var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// BrokerOptions returns the broker's options as this configuration sets
// them. Logger, Auth, Store, Events and Clock are left nil for the caller
// to wire. Call Validate first: out-of-range values are passed on as they
// are (and then refused by broker.New).
func (c *Config) BrokerOptions() broker.Options {
	e := c.WithDefaults()
	m := &e.MQTT
	o := broker.Options{
		NodeID:              e.NodeID,
		MaxPacketSize:       m.MaxPacketSize,
		ReceiveMaximum:      uint16(m.ReceiveMaximum),
		TopicAliasMaximum:   *m.TopicAliasMaximum,
		MaxKeepAlive:        m.MaxKeepAlive,
		MaxSessionExpiry:    m.MaxSessionExpiry,
		MaxQueuedMessages:   m.MaxQueuedMessages,
		MaxQueuedTotal:      m.MaxQueuedTotal,
		QueueQoS0:           m.QueueQoS0Messages,
		MaxPendingBytes:     m.MaxPendingBytes,
		MaxClientIDLength:   m.MaxClientIDLength,
		ConnectTimeout:      m.ConnectTimeout,
		WriteTimeout:        m.WriteTimeout,
		DisableRetain:       !*m.RetainAvailable,
		DisableWildcardSubs: !*m.WildcardSubscriptions,
		DisableSubIDs:       !*m.SubscriptionIdentifiers,
		DisableSharedSubs:   !*m.SharedSubscriptions,
		Shares:              broker.ShareOptions{Strategy: e.SharedSubscriptions.Strategy, Overload: e.SharedSubscriptions.Overload},
	}
	if o.TopicAliasMaximum == 0 {
		// In the file 0 means "no topic aliases", as on the wire; in
		// broker.Options 0 means "default" and negative means none.
		o.TopicAliasMaximum = -1
	}
	for _, g := range e.SharedSubscriptions.Groups {
		o.Shares.Groups = append(o.Shares.Groups, broker.GroupPolicy{
			Name:                   g.Name,
			Strategy:               g.Strategy,
			Overload:               g.Overload,
			StrictRotation:         !*g.SkipFullMembers,
			RedispatchOnDisconnect: g.RedispatchOnDisconnect,
			AllowedClients:         g.AllowedClients,
			MinMembers:             g.MinMembers,
			MaxMembers:             g.MaxMembers,
		})
	}
	return o
}
