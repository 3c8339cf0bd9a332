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
// # Limits: absent, a number, or unlimited
//
// Limits are typed ([Limit], [Size], [Duration]) and follow one rule, the
// one docs/configuration.md states: a key left out (or given no value) has
// its default; a number means that number; a limit that can be switched
// off takes the word "unlimited" ([Unlimited], negative in code, as in
// [broker.Options]). Writing 0 is an error for every limit where a zero
// limit would stop the broker working, because 0 meant "the default" for
// some keys and "no limit" for others. The zeros that stay mean what they
// say: topic_alias_maximum: 0 (no aliases, as in MQTT) and a group's
// min_members: 0 (no minimum).
//
// # Files
//
// [Parse] and [Load] read a file into yaml.v3's node tree and decode it on
// top of [Default] with this package's walker, which follows the tree and
// the structs together and so knows every value's key path and line. Keys
// left out keep their defaults, and so does a key with no value
// (`listen:`). Unknown keys, repeated keys and values of the wrong type are
// errors that name the key path and its line, in the form editors and CI
// logs understand:
//
//	linemq.yaml:7: unknown key "mqtt.recieve_maximum"; did you mean "mqtt.receive_maximum"?
//
// Reading a file does not check ranges and cross-field rules: call
// [Config.Validate] after applying command-line overrides ([Config.Override]),
// so that its errors say whether a bad value came from the file (with its
// line) or from a flag.
//
// # Adding an option
//
// Add the field with its yaml tag and doc comment, its default in
// [Default], its check in Validate and, for a broker option, its line in
// [Config.BrokerOptions]; then the row in docs/configuration.md and the key
// in docs/linemq.example.yaml, which TestExample reads.
package config

import (
	"cmp"
	"log/slog"
	"os"
	"reflect"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/gateway/bridge"
	"github.com/linemq/linemq/gateway/listen"
	"github.com/linemq/linemq/hw"
	"github.com/linemq/linemq/storage/bolt"
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
	LogLevel LogLevel `yaml:"log_level"`

	// LogFormat is text (the default) or json, for log collectors.
	LogFormat LogFormat `yaml:"log_format"`

	// MQTT configures the MQTT listener and protocol limits.
	MQTT MQTT `yaml:"mqtt"`

	// HTTP configures the status page and API listener.
	HTTP HTTP `yaml:"http"`

	// SharedSubscriptions configures share groups ($share/<name>/<filter>).
	SharedSubscriptions SharedSubscriptions `yaml:"shared_subscriptions"`

	// Storage configures how persistent state is written to DataDir.
	Storage Storage `yaml:"storage"`

	// Health configures the checks behind /readyz, the status LED and the
	// watchdog feeding.
	Health Health `yaml:"health"`

	// HW says where the LEDs and the watchdogs are; see package hw.
	HW hw.Config `yaml:"hw"`

	// Listeners are MQTT listeners: TCP, TLS, WebSocket and secure
	// WebSocket, each with its own connection limit (docs/security.md). A
	// file that lists them opens them instead of the default mqtt.listen,
	// unless mqtt.listen (or -mqtt-listen) is given as well.
	Listeners listen.Configs `yaml:"listeners"`

	// Auth decides who may connect and what they may publish and subscribe
	// to: Mosquitto's password and ACL files. Left out, anonymous clients
	// are accepted from this machine only.
	Auth auth.Config `yaml:"auth"`

	// Cluster joins this gateway to the other gateways of its line. Left
	// out (no cluster.listen), the gateway is standalone and needs no etcd.
	Cluster Cluster `yaml:"cluster"`

	// Sparkplug configures the Sparkplug B awareness (docs/sparkplug.md).
	Sparkplug Sparkplug `yaml:"sparkplug"`

	// Update configures signed updates and their trial (docs/updates.md).
	Update Update `yaml:"update"`

	// Bridges are uplinks to site or cloud brokers: the section is
	// gateway/bridge's (checked in bridge.go here; docs/bridge.md).
	Bridges []bridge.Config `yaml:"bridges"`

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

	// MaxPacketSize is the largest packet accepted from a client, up to the
	// protocol's 268435460 bytes. Default 1 MiB.
	MaxPacketSize Size `yaml:"max_packet_size"`

	// ReceiveMaximum is how many unacknowledged QoS 1/2 publishes a client
	// may have towards the broker, 1..65535. Default 1024.
	ReceiveMaximum Limit `yaml:"receive_maximum"`

	// TopicAliasMaximum is the highest topic alias a client may use,
	// 0..65535; 0 refuses topic aliases, as on the wire. Nil means 1024.
	TopicAliasMaximum *Limit `yaml:"topic_alias_maximum"`

	// MaxKeepAlive caps the keep alive clients ask for, in whole seconds up
	// to 65535s. Default Unlimited: the client's value stands.
	MaxKeepAlive Duration `yaml:"max_keepalive"`

	// MaxSessionExpiry caps the session expiry interval clients ask for, in
	// whole seconds. Default Unlimited (3.1.1 persistent sessions never
	// expire).
	MaxSessionExpiry Duration `yaml:"max_session_expiry"`

	// MaxQueuedMessages bounds each session's queue. Default 1000.
	MaxQueuedMessages Limit `yaml:"max_queued_messages"`

	// MaxQueuedTotal bounds the messages queued in all sessions together.
	// Default 100,000; Unlimited for no bound beyond the per-session one.
	MaxQueuedTotal Limit `yaml:"max_queued_total"`

	// QueueQoS0Messages queues QoS 0 messages for offline persistent
	// sessions too (in memory only). Default false: they are dropped.
	QueueQoS0Messages bool `yaml:"queue_qos0_messages"`

	// MaxPendingBytes bounds the bytes waiting to be written to one client.
	// Default 1 MiB.
	MaxPendingBytes Size `yaml:"max_pending_bytes"`

	// MaxPendingBytesTotal bounds the bytes waiting to be written to all
	// clients together. Default 256 MiB; Unlimited for none.
	MaxPendingBytesTotal Size `yaml:"max_pending_bytes_total"`

	// MaxClientIDLength is the longest client identifier accepted, up to
	// 65535. Default 256.
	MaxClientIDLength Limit `yaml:"max_client_id_length"`

	// MaxTopicLevels bounds the levels of a topic name or filter. Default
	// 128; Unlimited for none.
	MaxTopicLevels Limit `yaml:"max_topic_levels"`

	// MaxTopicLength bounds the length of a topic name or filter in bytes,
	// up to 65535. Default 4096; Unlimited for the protocol's 65535.
	MaxTopicLength Limit `yaml:"max_topic_length"`

	// PartialPacketTimeout is how long a packet that has started to arrive
	// may take to arrive completely. Default 30s; Unlimited for no limit.
	PartialPacketTimeout Duration `yaml:"partial_packet_timeout"`

	// ConnectTimeout is how long a new connection may take to send CONNECT.
	// Default 10s.
	ConnectTimeout Duration `yaml:"connect_timeout"`

	// MaxConnectSize is the largest CONNECT accepted, before anyone knows
	// who sends it (a larger one, in practice a large will, ends the
	// connection). Default 64KiB; at most max_packet_size.
	MaxConnectSize Size `yaml:"max_connect_size"`
	// MaxConnectingBytes bounds the read buffers of all connections that
	// have not completed CONNECT, together. Default 64MiB.
	MaxConnectingBytes Size `yaml:"max_connecting_bytes"`

	// WriteTimeout is how long one write to a client may block before the
	// connection is dropped. Default 30s.
	WriteTimeout Duration `yaml:"write_timeout"`

	// MaxConnections bounds the clients connected at once over every
	// listener; a CONNECT beyond it gets CONNACK 0x97 (3.1.1: 0x03).
	// Default 2048; Unlimited for none. Each listener has its own bound
	// too (listeners[].max_connections).
	MaxConnections Limit `yaml:"max_connections"`

	// MaxPublishRate is the PUBLISH packets per second one connection may
	// send, sustained: a v5 client over it is disconnected (0x96), a 3.1.1
	// client is slowed down. Default Unlimited.
	MaxPublishRate Limit `yaml:"max_publish_rate"`

	// PublishBurst is how many PUBLISH packets a connection may send at
	// once above MaxPublishRate. Default (0): MaxPublishRate, one second's
	// worth.
	PublishBurst Limit `yaml:"publish_burst"`

	// MaxSubscriptionsPerClient bounds one session's subscriptions; more
	// are refused in the SUBACK with 0x97 (3.1.1: 0x80). Default 1000;
	// Unlimited for none.
	MaxSubscriptionsPerClient Limit `yaml:"max_subscriptions_per_client"`

	// MaxSubscriptionBytes bounds the memory one session's subscriptions
	// take, estimated from each filter's length and levels; a filter that
	// would go past it is refused in the SUBACK with 0x97 (3.1.1: 0x80).
	// Default 3.5 MiB (3584KiB); Unlimited for none.
	MaxSubscriptionBytes Size `yaml:"max_subscription_bytes"`

	// MaxRetainedMessages and MaxRetainedBytes bound the retained messages
	// kept; one more is routed but not retained (v5 PUBACK 0x97). Defaults
	// 100,000 and 64 MiB; Unlimited for none.
	MaxRetainedMessages Limit `yaml:"max_retained_messages"`
	MaxRetainedBytes    Size  `yaml:"max_retained_bytes"`

	// MaxSessions bounds the sessions kept, connected or not; a CONNECT
	// that would create a new persistent session beyond it gets CONNACK
	// 0x97 (3.1.1: 0x03). Default 10,000; Unlimited for none.
	MaxSessions Limit `yaml:"max_sessions"`

	// RetainAvailable allows retained messages. Nil means true.
	RetainAvailable *bool `yaml:"retain_available"`

	// WildcardSubscriptions allows filters with + and #. Nil means true.
	WildcardSubscriptions *bool `yaml:"wildcard_subscriptions"`

	// SubscriptionIdentifiers allows v5 subscription identifiers. Nil means
	// true.
	SubscriptionIdentifiers *bool `yaml:"subscription_identifiers"`

	// SharedSubscriptions allows $share filters. Nil means true.
	SharedSubscriptions *bool `yaml:"shared_subscriptions"`

	// Overload is what a full session queue does with a new QoS 1/2
	// message: backpressure (the default: refuse it, v5 PUBACK 0x97, so
	// nothing acknowledged is dropped) or drop_oldest. Share groups follow
	// it unless shared_subscriptions.overload says otherwise.
	Overload Overload `yaml:"overload"`

	// DeniedSubscriptionReason is the MQTT 5 SUBACK code for a filter the
	// ACL refuses: not_authorized (0x87, the default) or unspecified_error
	// (0x80), for MQTT 5 clients that take only 0x80 as a failure.
	DeniedSubscriptionReason DeniedReason `yaml:"denied_subscription_reason"`

	// SysInterval is how often the $SYS/broker/... topics are published.
	// Default 10s; 0 turns them off.
	SysInterval *Duration `yaml:"sys_interval"`
}

// Cluster configures the gateway's membership of a cluster (docs/cluster.md).
type Cluster struct {
	// Name names the cluster: its etcd keys live under /linemq/<name>/,
	// and nodes of another cluster are refused. Default "linemq".
	Name string `yaml:"name"`

	// Listen is the host:port of the node-to-node transport; setting it
	// turns clustering on.
	Listen string `yaml:"listen"`

	// Advertise is the address other nodes dial to reach this one. Default:
	// Listen, which must then name a host.
	Advertise string `yaml:"advertise"`

	// Etcd says where the cluster's coordination lives.
	Etcd Etcd `yaml:"etcd"`

	// TLS makes the node-to-node transport mutual TLS. Left out, the
	// transport is plain TCP: keep it on a network of its own.
	TLS ClusterTLS `yaml:"tls"`

	// ExpectedNodes names the gateways of the line (node_id of each):
	// one that is not registered is reported missing (health check,
	// page, metrics, cluster LED). Gateways that ever registered, and the
	// members of an embedded etcd, are known without it; list them here
	// so that one never started, or one whose absence must survive a
	// restart of every other gateway with an external etcd, is reported
	// too.
	ExpectedNodes []string `yaml:"expected_nodes"`

	// Replicas is how many other gateways keep a copy of each persistent
	// session this one owns (its subscriptions, queued and in-flight
	// messages), so that the line keeps the session when this gateway
	// dies with its storage; a publisher's acknowledgement waits for the
	// copies. 0 keeps none. Default 1.
	Replicas *int `yaml:"replicas"`

	// Forwards bounds the QoS 1 and 2 messages kept here for another
	// gateway's ordinary subscribers until that gateway has them (while
	// it is down, frozen or cut off). When a bound is reached the oldest
	// are dropped, and counted.
	Forwards ForwardQueue `yaml:"forwards"`
}

// ForwardQueue bounds what is kept for each other gateway
// (cluster.forwards).
type ForwardQueue struct {
	// MaxBytes of kept messages (topic and payload) per gateway. Default
	// 64MiB.
	MaxBytes Size `yaml:"max_bytes"`
	// MaxAge of a kept message. Default 24h.
	MaxAge Duration `yaml:"max_age"`
	// BestEffort sends QoS 1 and 2 messages to other gateways once, as
	// QoS 0 ones, without keeping them: faster, and lost for the
	// subscribers of a gateway that is away. Default false.
	BestEffort bool `yaml:"best_effort"`
}

// Forward queue defaults.
const (
	DefaultForwardMaxBytes = Size(64 << 20)
	DefaultForwardMaxAge   = Duration(24 * time.Hour)
)

// Etcd is where a cluster's etcd is: external endpoints, or a member run
// inside this gateway (a 3-gateway line can host its own 3-member etcd).
type Etcd struct {
	// Endpoints are the client URLs of an external etcd (3.5 or later
	// recommended; 3.4 works).
	Endpoints []string `yaml:"endpoints"`

	// Embed runs an etcd member inside the gateway, its data under
	// <data_dir>/etcd.
	Embed bool `yaml:"embed"`

	// Name is the embedded member's name. Default: node_id.
	Name string `yaml:"name"`

	// PeerListen and ClientListen are the embedded member's peer and
	// client URLs, e.g. http://10.0.0.11:2380 and http://10.0.0.11:2379
	// (https:// with TLS).
	PeerListen   string `yaml:"peer_listen"`
	ClientListen string `yaml:"client_listen"`

	// InitialCluster lists every member as name=peer-url, comma-separated,
	// the same on every gateway. Default: this member alone.
	InitialCluster string `yaml:"initial_cluster"`

	// InitialClusterState is "new" (the default: the members start a
	// cluster together) or "existing": this member joins a cluster that
	// runs already, as a gateway replacing one whose SD card died does
	// after `linemq cluster replace`. Read only on a member's first start.
	InitialClusterState string `yaml:"initial_cluster_state"`

	// TLS is how the gateway's etcd client reaches https:// endpoints;
	// with Embed, the member's mutual TLS with the other members and its
	// clients (every URL then https://).
	TLS EtcdTLS `yaml:"tls"`
}

// Health configures the gateway's health checks.
type Health struct {
	// ProbeInterval is how often the broker's liveness probe and the
	// storage check run. Default 5s.
	ProbeInterval Duration `yaml:"probe_interval"`

	// ProbeTimeout is how long a probe may take before the broker counts
	// as wedged (failed: the watchdog stops being fed). Default 3s.
	ProbeTimeout Duration `yaml:"probe_timeout"`
}

// Update configures signed updates (docs/updates.md).
type Update struct {
	// KeysDir holds the public keys (*.pub) trusted to sign update
	// bundles. Default /etc/linemq/update-keys.
	KeysDir string `yaml:"keys_dir"`

	// Trial is how long a newly installed version must stay ready and
	// healthy before it is committed; until then a crash, a hang or a
	// failed health check brings the version before it back. Default 2m.
	Trial Duration `yaml:"trial"`

	// Admins are the users of auth.password_file who may upload a bundle
	// through the HTTP API (POST /api/v1/update); the gateway installs it
	// and restarts into it. Empty, the default: nobody may, and bundles
	// are applied on the gateway with `linemq update apply`. Needs the
	// HTTP login, and each admin must be one of http.users when that is
	// set.
	Admins []string `yaml:"admins"`
}

// HTTP configures the HTTP listener of the status page and API.
type HTTP struct {
	// Listen is the TCP address, host:port. Nil means the default ":8080";
	// an empty string disables the listener.
	Listen *string `yaml:"listen"`

	// Login is whether the page, the API and /metrics ask for a user name
	// and password from auth.password_file (HTTP Basic authentication):
	// required or off. Empty, the default, is required when a password
	// file is configured and off otherwise. /healthz and /readyz never
	// ask. See [Config.HTTPLoginRequired].
	Login HTTPLogin `yaml:"login"`

	// Users are the users of auth.password_file who may log in to the
	// status page; the others get 403 Forbidden. Empty: every user of the
	// file. Only with the login required.
	Users []string `yaml:"users"`
}

// HTTPLoginRequired reports whether the HTTP side asks for a login:
// http.login: required, or left out with auth.password_file set.
func (c *Config) HTTPLoginRequired() bool {
	switch c.HTTP.Login {
	case HTTPLoginRequired:
		return true
	case HTTPLoginOff:
		return false
	}
	return c.Auth.PasswordFile != ""
}

// SharedSubscriptions configures share groups.
type SharedSubscriptions struct {
	// Strategy is how groups no entry of Groups matches pick a member.
	// Default round_robin.
	Strategy Strategy `yaml:"strategy"`

	// Overload is what a group does when its workers cannot keep up:
	// backpressure (publishers' acknowledgements are held while a member's
	// queue is full, up to twice its limit, then new messages are refused
	// with 0x97, so nothing acknowledged is dropped) or drop_oldest (the
	// oldest queued message goes, counted). Default: mqtt.overload.
	Overload Overload `yaml:"overload"`

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
	Strategy Strategy `yaml:"strategy"`

	// Overload overrides SharedSubscriptions.Overload for these groups.
	Overload Overload `yaml:"overload"`

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

	// MinMembers marks a group degraded while it has fewer members; 0 (the
	// default) never does.
	MinMembers int `yaml:"min_members"`

	// MaxMembers refuses members beyond it. Default Unlimited.
	MaxMembers Limit `yaml:"max_members"`
}

// Storage configures how persistent state is written.
type Storage struct {
	// Sync is when writes reach the disk: always (every write is synced
	// before it is acknowledged), batch (writes are grouped and synced every
	// BatchInterval; the default) or none (the OS decides: fast, and loses
	// recent writes on power loss). See bolt.SyncMode.
	Sync SyncMode `yaml:"sync"`

	// BatchInterval is the longest a write waits for its batch to be synced
	// when Sync is batch. Default 10ms.
	BatchInterval Duration `yaml:"batch_interval"`

	// MaxSize bounds the database file (2MiB or more): past it a write
	// fails as on a full disk, and what it was for is refused (a publisher
	// gets 0x97), so that the broker cannot fill a data partition other
	// things need. Default unlimited (the partition's size). See
	// bolt.Options.MaxSize.
	MaxSize Size `yaml:"max_size"`
}

// Sparkplug configures the Sparkplug B awareness: births republished as
// certificates under $sparkplug/, every edge node's health watched.
type Sparkplug struct {
	// Aware turns the awareness on (Sparkplug 3.0's Aware server profile).
	// Nil means true; false leaves spBv1.0/ messages to plain MQTT.
	Aware *bool `yaml:"aware"`

	// MaxEdgeNodes bounds the edge nodes whose state is kept (1..1000000).
	// Default 10000.
	MaxEdgeNodes Limit `yaml:"max_edge_nodes"`

	// MetricsEdgeNodes is how many edge nodes get their own
	// linemq_sparkplug_edge_* series in /metrics (0..10000); the others
	// count in their group's only, so that a large plant cannot swamp
	// Prometheus. Nil means 100; 0 gives none their own.
	MetricsEdgeNodes *Limit `yaml:"metrics_edge_nodes"`
}

// Defaults that have no counterpart in package broker or storage/bolt.
const (
	DefaultDataDir    = "./data"
	DefaultLogLevel   = "info"
	DefaultLogFormat  = "text"
	DefaultMQTTListen = ":1883"
	DefaultHTTPListen = ":8080"
	DefaultStrategy   = "round_robin"

	DefaultMaxEdgeNodes     = 10_000
	DefaultMetricsEdgeNodes = 100

	DefaultClusterName   = "linemq"
	DefaultSysInterval   = 10 * time.Second
	DefaultProbeInterval = 5 * time.Second
	DefaultProbeTimeout  = 3 * time.Second

	DefaultUpdateKeysDir = "/etc/linemq/update-keys"
	DefaultUpdateTrial   = 2 * time.Minute
)

// DefaultReplicas is cluster.replicas' default.
const DefaultReplicas = 1

// MaxReplicas bounds cluster.replicas: a line has at most five gateways.
const MaxReplicas = 4

// Default returns a Config with every field set to its default. Each call
// returns new pointers, so callers may change the result freely.
func Default() *Config {
	return &Config{
		NodeID:    defaultNodeID(),
		DataDir:   DefaultDataDir,
		LogLevel:  DefaultLogLevel,
		LogFormat: DefaultLogFormat,
		MQTT: MQTT{
			Listen:                    new(DefaultMQTTListen),
			MaxPacketSize:             broker.DefaultMaxPacketSize,
			ReceiveMaximum:            broker.DefaultReceiveMaximum,
			TopicAliasMaximum:         new(Limit(broker.DefaultTopicAliasMaximum)),
			MaxKeepAlive:              Unlimited,
			MaxSessionExpiry:          Unlimited,
			MaxQueuedMessages:         broker.DefaultMaxQueuedMessages,
			MaxQueuedTotal:            broker.DefaultMaxQueuedTotal,
			MaxPendingBytes:           broker.DefaultMaxPendingBytes,
			MaxPendingBytesTotal:      broker.DefaultMaxPendingTotal,
			MaxClientIDLength:         broker.DefaultMaxClientIDLength,
			MaxTopicLevels:            broker.DefaultMaxTopicLevels,
			MaxTopicLength:            broker.DefaultMaxTopicLength,
			PartialPacketTimeout:      Duration(broker.DefaultPartialPacketTime),
			ConnectTimeout:            Duration(broker.DefaultConnectTimeout),
			MaxConnectSize:            broker.DefaultMaxConnectSize,
			MaxConnectingBytes:        broker.DefaultMaxConnecting,
			WriteTimeout:              Duration(broker.DefaultWriteTimeout),
			MaxConnections:            broker.DefaultMaxConnections,
			MaxPublishRate:            Unlimited,
			MaxSubscriptionsPerClient: broker.DefaultMaxSubscriptionsPerClient,
			MaxSubscriptionBytes:      broker.DefaultMaxSubscriptionBytesPerClient,
			MaxRetainedMessages:       broker.DefaultMaxRetainedMessages,
			MaxRetainedBytes:          broker.DefaultMaxRetainedBytes,
			MaxSessions:               broker.DefaultMaxSessions,
			RetainAvailable:           new(true),
			WildcardSubscriptions:     new(true),
			SubscriptionIdentifiers:   new(true),
			SharedSubscriptions:       new(true),
			Overload:                  broker.OverloadBackpressure,
			DeniedSubscriptionReason:  DeniedNotAuthorized,
			SysInterval:               new(Duration(DefaultSysInterval)),
		},
		HTTP:                HTTP{Listen: new(DefaultHTTPListen)},
		SharedSubscriptions: SharedSubscriptions{Strategy: DefaultStrategy},
		Health:              Health{ProbeInterval: Duration(DefaultProbeInterval), ProbeTimeout: Duration(DefaultProbeTimeout)},
		Cluster:             Cluster{Name: DefaultClusterName, Replicas: new(DefaultReplicas)},
		Update:              Update{KeysDir: DefaultUpdateKeysDir, Trial: Duration(DefaultUpdateTrial)},
		Storage:             Storage{Sync: SyncMode(bolt.SyncBatch), BatchInterval: Duration(bolt.DefaultBatchInterval), MaxSize: Unlimited},
		Sparkplug:           Sparkplug{Aware: new(true), MaxEdgeNodes: DefaultMaxEdgeNodes, MetricsEdgeNodes: new(Limit(DefaultMetricsEdgeNodes))},
	}
}

// defaultNodeID is the host name, or "linemq" on the odd system without one.
func defaultNodeID() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "linemq"
}

// WithDefaults returns a copy of c with every unset (zero) field set to its
// default, so that readers need not know which zero means what; a group's
// unset strategy and overload are the section's. The copy has its own
// pointers and its own Groups slice; other slices are shared with c. It
// keeps c's record of where values came from.
func (c *Config) WithDefaults() *Config {
	o := *c
	fill(reflect.ValueOf(&o).Elem(), reflect.ValueOf(Default()).Elem(), true)
	s := &o.SharedSubscriptions
	if s.Groups != nil {
		s.Groups = append([]ShareGroup(nil), s.Groups...)
		for i := range s.Groups {
			g := &s.Groups[i]
			g.Strategy = cmp.Or(g.Strategy, s.Strategy)
			g.Overload = cmp.Or(g.Overload, s.Overload)
			if g.SkipFullMembers == nil {
				g.SkipFullMembers = new(true)
			}
			g.MaxMembers = cmp.Or(g.MaxMembers, Unlimited)
		}
	}
	return &o
}

// fill walks the exported fields of the struct v, into nested structs. It
// points each non-nil pointer at a copy of its value, so that v shares no
// pointer with the Config it was copied from (yaml.v3 decodes through
// pointers, see Override). When def, a struct of the same type, is valid,
// it sets each nil pointer to def's and, if zeros is set, each other zero
// field too. Reflection keeps WithDefaults from needing a line per field:
// a new field with its default in Default is filled as well.
func fill(v, def reflect.Value, zeros bool) {
	for i := range v.NumField() {
		f := v.Field(i)
		var d reflect.Value
		if def.IsValid() {
			d = def.Field(i)
		}
		switch {
		case !f.CanSet():
		case f.Kind() == reflect.Struct:
			fill(f, d, zeros)
		case f.Kind() == reflect.Pointer && !f.IsNil():
			p := reflect.New(f.Type().Elem())
			p.Elem().Set(f.Elem())
			f.Set(p)
		case d.IsValid() && f.IsZero() && (zeros || f.Kind() == reflect.Pointer):
			f.Set(d)
		}
	}
}

// Level returns LogLevel as a slog level; info when it is unset or not a
// level (Validate reports the latter).
func (c *Config) Level() slog.Level { return c.LogLevel.Level() }

// BrokerOptions returns the broker's options as this configuration sets
// them. Logger, Auth, Store, Events and Clock are left nil for the caller
// to wire. Call Validate first: out-of-range values are passed on as they
// are (and then refused by broker.New).
func (c *Config) BrokerOptions() broker.Options {
	e := c.WithDefaults()
	m := &e.MQTT
	o := broker.Options{
		MaxPacketSize:                 int(m.MaxPacketSize),
		ReceiveMaximum:                uint16(m.ReceiveMaximum),
		TopicAliasMaximum:             int(*m.TopicAliasMaximum),
		MaxKeepAlive:                  uncapped(m.MaxKeepAlive),
		MaxSessionExpiry:              uncapped(m.MaxSessionExpiry),
		MaxQueuedMessages:             int(m.MaxQueuedMessages),
		MaxQueuedTotal:                int(m.MaxQueuedTotal),
		QueueQoS0:                     m.QueueQoS0Messages,
		MaxPendingBytes:               int(m.MaxPendingBytes),
		MaxPendingBytesTotal:          int(m.MaxPendingBytesTotal),
		MaxClientIDLength:             int(m.MaxClientIDLength),
		MaxTopicLevels:                int(m.MaxTopicLevels),
		MaxTopicLength:                int(m.MaxTopicLength),
		PartialPacketTimeout:          time.Duration(m.PartialPacketTimeout),
		ConnectTimeout:                time.Duration(m.ConnectTimeout),
		MaxConnectSize:                int(m.MaxConnectSize),
		MaxConnectingBytes:            int64(m.MaxConnectingBytes),
		WriteTimeout:                  time.Duration(m.WriteTimeout),
		MaxConnections:                int(m.MaxConnections),
		MaxPublishRate:                int(max(m.MaxPublishRate, 0)), // broker: 0 is no limit
		PublishBurst:                  int(m.PublishBurst),
		MaxSubscriptionsPerClient:     int(m.MaxSubscriptionsPerClient),
		MaxSubscriptionBytesPerClient: int(m.MaxSubscriptionBytes),
		MaxRetainedMessages:           int(m.MaxRetainedMessages),
		MaxRetainedBytes:              int(m.MaxRetainedBytes),
		MaxSessions:                   int(m.MaxSessions),
		DisableRetain:                 !*m.RetainAvailable,
		DisableWildcardSubs:           !*m.WildcardSubscriptions,
		DisableSubIDs:                 !*m.SubscriptionIdentifiers,
		DisableSharedSubs:             !*m.SharedSubscriptions,
		Overload:                      string(m.Overload),
		DeniedSubscriptionReason:      m.DeniedSubscriptionReason.code(),
		Shares: broker.ShareOptions{
			Strategy: string(e.SharedSubscriptions.Strategy),
			Overload: string(e.SharedSubscriptions.Overload),
		},
		Forwards: broker.ForwardOptions{
			MaxBytes:   int64(c.Cluster.Forwards.MaxBytes),
			MaxAge:     time.Duration(c.Cluster.Forwards.MaxAge),
			BestEffort: c.Cluster.Forwards.BestEffort,
		},
	}
	if o.TopicAliasMaximum == 0 {
		// In the file 0 means "no topic aliases", as on the wire; in
		// broker.Options 0 means "default" and negative means none.
		o.TopicAliasMaximum = -1
	}
	for _, g := range e.SharedSubscriptions.Groups {
		o.Shares.Groups = append(o.Shares.Groups, broker.GroupPolicy{
			Name:                   g.Name,
			Strategy:               string(g.Strategy),
			Overload:               string(g.Overload),
			StrictRotation:         !*g.SkipFullMembers,
			RedispatchOnDisconnect: g.RedispatchOnDisconnect,
			AllowedClients:         g.AllowedClients,
			MinMembers:             g.MinMembers,
			MaxMembers:             int(max(g.MaxMembers, 0)), // broker: 0 is no limit
		})
	}
	return o
}

// uncapped converts a cap whose "no cap" is 0 in broker.Options (keep
// alive, session expiry) rather than negative.
func uncapped(d Duration) time.Duration { return time.Duration(max(d, 0)) }
