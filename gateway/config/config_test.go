package config

import (
	"errors"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/share"
	"github.com/linemq/linemq/storage/bolt"
)

const file = "linemq.yaml"

// example is the example configuration shipped in the documentation, the
// one copy there is: TestExample checks it and FuzzParse starts from it.
const example = "../../docs/linemq.example.yaml"

// lines joins its arguments as the lines of a file, so that the tests can
// count line numbers by eye.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

const strategies = "(valid: round_robin, random, sticky, hash_clientid, hash_topic, prefer_local)"

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{
			name: "unknown nested key",
			yaml: lines(
				"node_id: gw-1",
				"data_dir: ./data",
				"log_level: info",
				"mqtt:",
				`  listen: ":1883"`,
				"  max_packet_size: 1048576",
				"  recieve_maximum: 1024",
			),
			want: `linemq.yaml:7: unknown key "mqtt.recieve_maximum"; did you mean "mqtt.receive_maximum"?`,
		},
		{
			name: "unknown top-level key",
			yaml: lines("log_level: info", "loglevel: debug"),
			want: `linemq.yaml:2: unknown key "loglevel"; did you mean "log_level"?`,
		},
		{
			name: "typo in a list item",
			yaml: lines(
				"shared_subscriptions:",
				"  groups:",
				"    - name: a",
				"    - name: b",
				"      stratgy: random",
			),
			want: `linemq.yaml:5: unknown key "shared_subscriptions.groups[1].stratgy"; did you mean "shared_subscriptions.groups[1].strategy"?`,
		},
		{
			name: "every problem is reported",
			yaml: lines("mqtt:", "  lisen: x", "  connect_timeout: 10", "htp:", "  listen: y"),
			want: `linemq.yaml:2: unknown key "mqtt.lisen"; did you mean "mqtt.listen"?` + "\n" +
				`linemq.yaml:3: mqtt.connect_timeout: "10" is not a duration (write it like "10s", "500ms" or "1h30m")` + "\n" +
				`linemq.yaml:4: unknown key "htp"; did you mean "http"?`,
		},
		{
			name: "duplicate key",
			yaml: lines("mqtt:", "  listen: a:1", "  listen: b:2"),
			want: `linemq.yaml:3: mqtt.listen: repeated key (first set at line 2)`,
		},
		{
			name: "duplicate key in a list item",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      name: b"),
			want: `linemq.yaml:4: shared_subscriptions.groups[0].name: repeated key (first set at line 3)`,
		},
		{
			name: "not a number",
			yaml: lines("mqtt:", "  max_queued_messages: many"),
			want: `linemq.yaml:2: mqtt.max_queued_messages: "many" is not a whole number`,
		},
		{
			name: "fraction for a count",
			yaml: lines("mqtt:", "  receive_maximum: 1.5"),
			want: `linemq.yaml:2: mqtt.receive_maximum: "1.5" is not a whole number`,
		},
		{
			name: "negative count",
			yaml: lines("mqtt:", "  max_queued_total: -1"),
			want: `linemq.yaml:2: mqtt.max_queued_total: must not be negative (got -1)`,
		},
		{
			name: "count too large",
			yaml: lines("mqtt:", "  max_topic_levels: 99999999999999999999"),
			want: `linemq.yaml:2: mqtt.max_topic_levels: 99999999999999999999 is too large`,
		},
		{
			name: "size with a decimal unit",
			yaml: lines("mqtt:", "  max_packet_size: 1MB"),
			want: `linemq.yaml:2: mqtt.max_packet_size: "1MB" is not a size (write a number of bytes, or one with KiB, MiB or GiB: "64KiB")`,
		},
		{
			name: "size too large",
			yaml: lines("mqtt:", "  max_pending_bytes_total: 9999999999GiB"),
			want: `linemq.yaml:2: mqtt.max_pending_bytes_total: 9999999999GiB is too large`,
		},
		{
			name: "duration without unit",
			yaml: lines("mqtt:", "  connect_timeout: 10"),
			want: `linemq.yaml:2: mqtt.connect_timeout: "10" is not a duration (write it like "10s", "500ms" or "1h30m")`,
		},
		{
			name: "bad duration",
			yaml: lines("storage:", "  batch_interval: 10 ms"),
			want: `linemq.yaml:2: storage.batch_interval: "10 ms" is not a duration (write it like "10s", "500ms" or "1h30m")`,
		},
		{
			name: "negative duration",
			yaml: lines("mqtt:", "  partial_packet_timeout: -1s"),
			want: `linemq.yaml:2: mqtt.partial_packet_timeout: must not be negative (got -1s)`,
		},
		{
			name: "bad strategy",
			yaml: lines(
				"node_id: gw-1",
				"",
				"# Historians see every message of their topics.",
				"shared_subscriptions:",
				"  strategy: round_robin",
				"  groups:",
				`    - name: "hist-*"`,
				"      strategy: fastest",
			),
			want: `linemq.yaml:8: shared_subscriptions.groups[0].strategy: unknown strategy "fastest" ` + strategies,
		},
		{
			name: "bad overload mode",
			yaml: lines("shared_subscriptions:", "  overload: block", "  groups:", "    - name: g", "      overload: drop_newest"),
			want: `linemq.yaml:2: shared_subscriptions.overload: unknown value "block" (valid: backpressure, drop_oldest)` + "\n" +
				`linemq.yaml:5: shared_subscriptions.groups[0].overload: unknown value "drop_newest" (valid: backpressure, drop_oldest)`,
		},
		{
			name: "bad sync mode",
			yaml: lines("storage:", "  sync: sometimes"),
			want: `linemq.yaml:2: storage.sync: unknown sync mode "sometimes" (want always, batch or none)`,
		},
		{
			name: "bad log level",
			yaml: lines("log_level: verbose"),
			want: `linemq.yaml:1: log_level: unknown level "verbose" (valid: debug, info, warn, error)`,
		},
		{
			name: "bad log format",
			yaml: lines("log_format: logfmt"),
			want: `linemq.yaml:1: log_format: unknown format "logfmt" (valid: text, json)`,
		},
		{
			name: "not a boolean",
			yaml: lines("mqtt:", "  retain_available: maybe"),
			want: `linemq.yaml:2: mqtt.retain_available: expected true or false, got "maybe"`,
		},
		{
			name: "not a boolean in a list item",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      skip_full_members: 2"),
			want: `linemq.yaml:4: shared_subscriptions.groups[0].skip_full_members: expected true or false, got "2"`,
		},
		{
			name: "not an integer",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      min_members: one"),
			want: `linemq.yaml:4: shared_subscriptions.groups[0].min_members: expected an integer, got "one"`,
		},
		{
			name: "scalar for a section",
			yaml: lines("mqtt: 1883"),
			want: `linemq.yaml:1: mqtt: expected a mapping of keys, got "1883"`,
		},
		{
			name: "scalar for a list",
			yaml: lines("shared_subscriptions:", "  groups: hist"),
			want: `linemq.yaml:2: shared_subscriptions.groups: expected a list, got "hist"`,
		},
		{
			name: "list for a string",
			yaml: lines("node_id: [a, b]"),
			want: `linemq.yaml:1: node_id: expected a string, got a list`,
		},
		{
			name: "mapping for a duration",
			yaml: lines("storage:", "  batch_interval:", "    ms: 10"),
			want: `linemq.yaml:2: storage.batch_interval: expected a duration, got a mapping`,
		},
		{
			name: "list for a word",
			yaml: lines("log_level: [debug]"),
			want: `linemq.yaml:1: log_level: expected a word, got a list`,
		},
		{
			name: "mapping in a string list",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      allowed_clients:", "        - {id: x}"),
			want: `linemq.yaml:5: shared_subscriptions.groups[0].allowed_clients[0]: expected a string, got a mapping`,
		},
		{
			name: "flow mapping with several keys on a line",
			yaml: lines("mqtt: {listen: ':1883', max_queued_messages: lots, connect_timeout: 5}"),
			want: `linemq.yaml:1: mqtt.max_queued_messages: "lots" is not a whole number` + "\n" +
				`linemq.yaml:1: mqtt.connect_timeout: "5" is not a duration (write it like "10s", "500ms" or "1h30m")`,
		},
		{
			name: "a list as a key",
			yaml: lines("? [a, b]", ": c"),
			want: `linemq.yaml:1: expected a string, got a list`,
		},
		{
			name: "top level is a list",
			yaml: lines("- a", "- b"),
			want: `linemq.yaml:1: expected a mapping of keys at the top level, got a list`,
		},
		{
			name: "second document",
			yaml: lines("log_level: info", "---", "log_level: debug"),
			want: `linemq.yaml:3: a second document (after "---"): the configuration must be one document`,
		},
		{
			name: "tabs",
			yaml: lines("mqtt:", "\tlisten: x"),
			want: `linemq.yaml:2: found character that cannot start any token: a tab indents this line or the next; YAML indents with spaces only`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), file)
			if err == nil {
				t.Fatalf("Parse succeeded (%+v), want error %q", c, tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

// TestParseDefaults checks the files that leave everything at its default:
// an empty one, one with only comments, and keys given no value.
func TestParseDefaults(t *testing.T) {
	def := Default()
	for _, data := range []string{
		"", "# only a comment\n", "---\n", "---\n...\n", "log_level: info\n---\n",
		"mqtt:\n", "mqtt:\n  listen:\n  retain_available: ~\n  max_packet_size:\n  connect_timeout:\n",
		"shared_subscriptions:\n  strategy:\n  groups:\n", "storage:\n  sync:\n",
	} {
		c, err := Parse([]byte(data), file)
		if err != nil {
			t.Fatalf("Parse(%q): %v", data, err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("Parse(%q): Validate: %v", data, err)
		}
		c.src = nil
		if !reflect.DeepEqual(c, def) {
			t.Errorf("Parse(%q) = %+v\nwant Default() = %+v", data, c, def)
		}
	}
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{
			name: "node id with a slash",
			yaml: lines("node_id: gw/1"),
			want: `linemq.yaml:1: node_id: "gw/1" must not contain "/", spaces or control characters`,
		},
		{
			name: "node id with a space",
			yaml: lines(`node_id: "gw 1"`),
			want: `linemq.yaml:1: node_id: "gw 1" must not contain "/", spaces or control characters`,
		},
		{
			name: "batch interval zero",
			yaml: lines("storage:", "  batch_interval: 0s"),
			want: `linemq.yaml:2: storage.batch_interval: 0 is not allowed (1ms or more); leave the key out for the default (10ms)`,
		},
		{
			name: "batch interval below a millisecond",
			yaml: lines("storage:", "  batch_interval: 100us"),
			want: `linemq.yaml:2: storage.batch_interval: 100µs out of range (1ms or more)`,
		},
		{
			name: "database bound below 2MiB",
			yaml: lines("storage:", "  max_size: 1MiB"),
			want: `linemq.yaml:2: storage.max_size: 1MiB out of range (2MiB or more, or unlimited)`,
		},
		{
			name: "acl_overlap neither refuse nor filter",
			yaml: lines("auth:", "  acl_overlap: grant"),
			want: `linemq.yaml:2: auth.acl_overlap: "grant" is neither "refuse" nor "filter"`,
		},
		{
			name: "connect size below 1KiB",
			yaml: lines("mqtt:", "  max_connect_size: 512"),
			want: `linemq.yaml:2: mqtt.max_connect_size: 512 out of range (1KiB or more)`,
		},
		{
			name: "connect size above the packet size",
			yaml: lines("mqtt:", "  max_packet_size: 32KiB", "  max_connect_size: 64KiB"),
			want: `linemq.yaml:3: mqtt.max_connect_size: 64KiB is larger than mqtt.max_packet_size (32KiB)`,
		},
		{
			name: "connecting bytes below 1MiB",
			yaml: lines("mqtt:", "  max_connecting_bytes: 64KiB"),
			want: `linemq.yaml:2: mqtt.max_connecting_bytes: 64KiB out of range (1MiB or more)`,
		},
		{
			name: "max sessions zero",
			yaml: lines("mqtt:", "  max_sessions: 0"),
			want: `linemq.yaml:2: mqtt.max_sessions: 0 is not allowed (1 or more, or unlimited); leave the key out for the default (10000), or write unlimited for no limit`,
		},
		{
			name: "publish burst without a rate",
			yaml: lines("mqtt:", "  publish_burst: 10"),
			want: `linemq.yaml:2: mqtt.publish_burst: has no effect while mqtt.max_publish_rate is unlimited: set the rate too, or leave this key out`,
		},
		{
			name: "max packet size too large",
			yaml: lines("mqtt:", "  max_packet_size: 268435461"),
			want: `linemq.yaml:2: mqtt.max_packet_size: 268435461 out of range (1..268435460)`,
		},
		{
			name: "max packet size in units too large",
			yaml: lines("mqtt:", "  max_packet_size: 1GiB"),
			want: `linemq.yaml:2: mqtt.max_packet_size: 1GiB out of range (1..268435460)`,
		},
		{
			name: "max packet size unlimited",
			yaml: lines("mqtt:", "  max_packet_size: unlimited"),
			want: `linemq.yaml:2: mqtt.max_packet_size: cannot be unlimited (1..268435460)`,
		},
		{
			name: "receive maximum zero",
			yaml: lines("mqtt:", "  receive_maximum: 0"),
			want: `linemq.yaml:2: mqtt.receive_maximum: 0 is not allowed (1..65535); leave the key out for the default (1024)`,
		},
		{
			name: "receive maximum too large",
			yaml: lines("mqtt:", "  receive_maximum: 65536"),
			want: `linemq.yaml:2: mqtt.receive_maximum: 65536 out of range (1..65535)`,
		},
		{
			name: "topic alias maximum too large",
			yaml: lines("mqtt:", "  topic_alias_maximum: 65536"),
			want: `linemq.yaml:2: mqtt.topic_alias_maximum: 65536 out of range (0..65535)`,
		},
		{
			name: "keep alive too long",
			yaml: lines("mqtt:", "  max_keepalive: 65536s"),
			want: `linemq.yaml:2: mqtt.max_keepalive: 18h12m16s out of range (1s..65535s, or unlimited)`,
		},
		{
			name: "keep alive zero",
			yaml: lines("mqtt:", "  max_keepalive: 0s"),
			want: `linemq.yaml:2: mqtt.max_keepalive: 0 is not allowed (1s..65535s, or unlimited); leave the key out, or write unlimited, for no limit`,
		},
		{
			name: "keep alive not whole seconds",
			yaml: lines("mqtt:", "  max_keepalive: 1500ms"),
			want: `linemq.yaml:2: mqtt.max_keepalive: 1.5s is not a whole number of seconds`,
		},
		{
			name: "session expiry too long",
			yaml: lines("mqtt:", "  max_session_expiry: 4294967296s"),
			want: `linemq.yaml:2: mqtt.max_session_expiry: 1193046h28m16s out of range (1s..4294967295s, or unlimited)`,
		},
		{
			name: "queued messages unlimited",
			yaml: lines("mqtt:", "  max_queued_messages: unlimited"),
			want: `linemq.yaml:2: mqtt.max_queued_messages: cannot be unlimited (1 or more)`,
		},
		{
			name: "queued total zero",
			yaml: lines("mqtt:", "  max_queued_total: 0"),
			want: `linemq.yaml:2: mqtt.max_queued_total: 0 is not allowed (1 or more, or unlimited); leave the key out for the default (100000), or write unlimited for no limit`,
		},
		{
			name: "pending bytes total zero",
			yaml: lines("mqtt:", "  max_pending_bytes_total: 0"),
			want: `linemq.yaml:2: mqtt.max_pending_bytes_total: 0 is not allowed (1 or more, or unlimited); leave the key out for the default (256MiB), or write unlimited for no limit`,
		},
		{
			name: "client id length too large",
			yaml: lines("mqtt:", "  max_client_id_length: 65536"),
			want: `linemq.yaml:2: mqtt.max_client_id_length: 65536 out of range (1..65535)`,
		},
		{
			name: "topic length too large",
			yaml: lines("mqtt:", "  max_topic_length: 70000"),
			want: `linemq.yaml:2: mqtt.max_topic_length: 70000 out of range (1..65535, or unlimited)`,
		},
		{
			name: "connect timeout unlimited",
			yaml: lines("mqtt:", "  connect_timeout: unlimited"),
			want: `linemq.yaml:2: mqtt.connect_timeout: cannot be unlimited (1ms or more)`,
		},
		{
			name: "listen without port",
			yaml: lines("mqtt:", "  listen: 1883"),
			want: `linemq.yaml:2: mqtt.listen: invalid address "1883": missing port in address (write it as host:port, or :port for all interfaces)`,
		},
		{
			name: "listen with a named port",
			yaml: lines("mqtt:", "  listen: localhost:mqtt"),
			want: `linemq.yaml:2: mqtt.listen: invalid port "mqtt" in "localhost:mqtt" (need 0..65535)`,
		},
		{
			name: "http listen port out of range",
			yaml: lines("http:", `  listen: ":65536"`),
			want: `linemq.yaml:2: http.listen: invalid port "65536" in ":65536" (need 0..65535)`,
		},
		{
			name: "group without a name",
			yaml: lines("shared_subscriptions:", "  groups:", "    - strategy: random"),
			want: `linemq.yaml:3: shared_subscriptions.groups[0].name: required`,
		},
		{
			name: "group name bad glob",
			yaml: lines("shared_subscriptions:", "  groups:", `    - name: "hist-["`),
			want: `linemq.yaml:3: shared_subscriptions.groups[0].name: bad pattern "hist-[": syntax error in pattern`,
		},
		{
			name: "group name with a slash",
			yaml: lines("shared_subscriptions:", "  groups:", `    - name: "a/b"`),
			want: `linemq.yaml:3: shared_subscriptions.groups[0].name: "a/b" can never match: share names cannot contain "/", "+" or "#"`,
		},
		{
			name: "group name repeated",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a*", "    - name: b", "    - name: a*"),
			want: `linemq.yaml:5: shared_subscriptions.groups[2].name: "a*" repeats groups[0]; only the first entry that matches applies`,
		},
		{
			name: "allowed clients bad glob",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", `      allowed_clients: ["ok-*", "[x"]`),
			want: `linemq.yaml:4: shared_subscriptions.groups[0].allowed_clients[1]: bad pattern "[x": syntax error in pattern`,
		},
		{
			name: "allowed clients empty pattern",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      allowed_clients:", `        - ""`),
			want: `linemq.yaml:5: shared_subscriptions.groups[0].allowed_clients[0]: empty pattern`,
		},
		{
			name: "min members negative",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      min_members: -1"),
			want: `linemq.yaml:4: shared_subscriptions.groups[0].min_members: must not be negative (got -1)`,
		},
		{
			name: "max members zero",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      max_members: 0"),
			want: `linemq.yaml:4: shared_subscriptions.groups[0].max_members: 0 is not allowed (1 or more, or unlimited); leave the key out, or write unlimited, for no limit`,
		},
		{
			name: "min members above max",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      min_members: 3", "      max_members: 1"),
			want: `linemq.yaml:4: shared_subscriptions.groups[0].min_members: 3 exceeds max_members (1)`,
		},
		{
			name: "several errors",
			yaml: lines("node_id: a/b", "mqtt:", "  receive_maximum: 0", "storage:", "  batch_interval: 0s"),
			want: `linemq.yaml:1: node_id: "a/b" must not contain "/", spaces or control characters` + "\n" +
				`linemq.yaml:3: mqtt.receive_maximum: 0 is not allowed (1..65535); leave the key out for the default (1024)` + "\n" +
				`linemq.yaml:5: storage.batch_interval: 0 is not allowed (1ms or more); leave the key out for the default (10ms)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), file)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			err = c.Validate()
			if err == nil {
				t.Fatalf("Validate succeeded, want %q", tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Validate error\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

// TestZeroAndUnlimited checks the rule of docs/configuration.md on every
// limit key: left out it is the default; 0 is an error naming the key
// (except topic_alias_maximum, where 0 means no aliases); "unlimited" is
// accepted where the limit can be switched off, and reaches the broker as
// its own "no limit".
func TestZeroAndUnlimited(t *testing.T) {
	// unlimited: what broker.Options gets for "unlimited" (nil: refused).
	tests := []struct {
		key       string
		zero      string // the value 0 is written as
		zeroOK    bool
		unlimited func(broker.Options) bool
	}{
		{key: "mqtt.max_packet_size", zero: "0"},
		{key: "mqtt.receive_maximum", zero: "0"},
		{key: "mqtt.topic_alias_maximum", zero: "0", zeroOK: true},
		{key: "mqtt.max_keepalive", zero: "0s", unlimited: func(o broker.Options) bool { return o.MaxKeepAlive == 0 }},
		{key: "mqtt.max_session_expiry", zero: "0s", unlimited: func(o broker.Options) bool { return o.MaxSessionExpiry == 0 }},
		{key: "mqtt.max_queued_messages", zero: "0"},
		{key: "mqtt.max_queued_total", zero: "0", unlimited: func(o broker.Options) bool { return o.MaxQueuedTotal < 0 }},
		{key: "mqtt.max_pending_bytes", zero: "0"},
		{key: "mqtt.max_pending_bytes_total", zero: "0KiB", unlimited: func(o broker.Options) bool { return o.MaxPendingBytesTotal < 0 }},
		{key: "mqtt.max_client_id_length", zero: "0"},
		{key: "mqtt.max_topic_levels", zero: "0", unlimited: func(o broker.Options) bool { return o.MaxTopicLevels < 0 }},
		{key: "mqtt.max_topic_length", zero: "0", unlimited: func(o broker.Options) bool { return o.MaxTopicLength < 0 }},
		{key: "mqtt.partial_packet_timeout", zero: "0ms", unlimited: func(o broker.Options) bool { return o.PartialPacketTimeout < 0 }},
		{key: "mqtt.connect_timeout", zero: "0s"},
		{key: "mqtt.write_timeout", zero: "0s"},
		{key: "mqtt.max_connections", zero: "0", unlimited: func(o broker.Options) bool { return o.MaxConnections < 0 }},
		{key: "mqtt.max_publish_rate", zero: "0", unlimited: func(o broker.Options) bool { return o.MaxPublishRate == 0 }},
		{key: "mqtt.publish_burst", zero: "0"},
		{key: "mqtt.max_subscriptions_per_client", zero: "0", unlimited: func(o broker.Options) bool { return o.MaxSubscriptionsPerClient < 0 }},
		{key: "mqtt.max_subscription_bytes", zero: "0", unlimited: func(o broker.Options) bool { return o.MaxSubscriptionBytesPerClient < 0 }},
		{key: "mqtt.max_retained_messages", zero: "0", unlimited: func(o broker.Options) bool { return o.MaxRetainedMessages < 0 }},
		{key: "mqtt.max_retained_bytes", zero: "0MiB", unlimited: func(o broker.Options) bool { return o.MaxRetainedBytes < 0 }},
		{key: "mqtt.max_sessions", zero: "0", unlimited: func(o broker.Options) bool { return o.MaxSessions < 0 }},
		{key: "storage.batch_interval", zero: "0s"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			section, name, _ := strings.Cut(tt.key, ".")
			doc := func(v string) []byte { return []byte(lines(section+":", "  "+name+": "+v)) }

			c, err := Parse(doc(tt.zero), file)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			if tt.zeroOK {
				if err != nil {
					t.Errorf("%s: %v", tt.zero, err)
				}
			} else if prefix := "linemq.yaml:2: " + tt.key + ": 0 is not allowed"; err == nil || !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("%s: Validate = %v, want %s...", tt.zero, err, prefix)
			}

			// The same 0 from a flag is blamed on the flag.
			c = Default()
			if err := c.Override(tt.key, tt.zero, "flag -x"); err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			if !tt.zeroOK {
				if prefix := "flag -x: " + tt.key + ": 0 is not allowed"; err == nil || !strings.HasPrefix(err.Error(), prefix) {
					t.Errorf("flag %s: Validate = %v, want %s...", tt.zero, err, prefix)
				}
			}

			c, err = Parse(doc("unlimited"), file)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			if tt.unlimited == nil {
				if prefix := "linemq.yaml:2: " + tt.key + ": cannot be unlimited"; err == nil || !strings.HasPrefix(err.Error(), prefix) {
					t.Errorf("unlimited: Validate = %v, want %s...", err, prefix)
				}
				return
			}
			if err != nil {
				t.Fatalf("unlimited: %v", err)
			}
			if o := c.BrokerOptions(); !tt.unlimited(o) {
				t.Errorf("unlimited: BrokerOptions = %+v", o)
			}
			srv, err := broker.New(c.BrokerOptions())
			if err != nil {
				t.Fatalf("unlimited: broker.New: %v", err)
			}
			srv.Close()
		})
	}
}

func TestErrorValues(t *testing.T) {
	_, err := Parse([]byte("mqtt:\n  recieve_maximum: 1\n"), file)
	var ce *Error
	if !errors.As(err, &ce) || !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Parse error %#v: want an *Error wrapping ErrUnknownKey", err)
	}
	if want := (Error{File: file, Line: 2, Key: "mqtt.recieve_maximum", Err: ErrUnknownKey, Hint: `did you mean "mqtt.receive_maximum"?`}); *ce != want {
		t.Errorf("got %+v, want %+v", *ce, want)
	}

	c := Default()
	c.SharedSubscriptions.Strategy = "fastest"
	if err := c.Validate(); !errors.Is(err, share.ErrUnknownStrategy) {
		t.Errorf("Validate error %v does not wrap share.ErrUnknownStrategy", err)
	}
}

// TestValidateInCode checks errors about a Config built in code: they name
// the key but no file or line, and a zero is a default, not an error.
func TestValidateInCode(t *testing.T) {
	c := &Config{}
	c.MQTT.ReceiveMaximum = 70000
	c.MQTT.MaxQueuedTotal = Unlimited
	c.MQTT.MaxPacketSize = -5
	c.LogFormat = "xml"
	c.Storage.Sync = SyncMode(7)
	c.SharedSubscriptions.Groups = []ShareGroup{{Strategy: "fastest", Name: "g"}}
	want := `log_format: unknown format "xml" (valid: text, json)` + "\n" +
		`mqtt.max_packet_size: cannot be unlimited (1..268435460)` + "\n" +
		`mqtt.receive_maximum: 70000 out of range (1..65535)` + "\n" +
		`shared_subscriptions.groups[0].strategy: unknown strategy "fastest" ` + strategies + "\n" +
		`storage.sync: unknown sync mode "SyncMode(7)" (want always, batch or none)`
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate error\n got: %v\nwant: %s", err, want)
	}
}

func TestOverride(t *testing.T) {
	data := lines(
		"log_level: debug",
		"mqtt:",
		"  listen: 1883", // invalid, but overridden below
	)
	c, err := Parse([]byte(data), file)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Override("mqtt.listen", "127.0.0.1:0", "flag -mqtt-listen"); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate after fixing override: %v", err)
	}
	if got := *c.MQTT.Listen; got != "127.0.0.1:0" {
		t.Errorf("listen = %q", got)
	}

	// A bad value from a flag is blamed on the flag, not on the file's line.
	if err := c.Override("mqtt.max_queued_messages", "70000000000", "flag -q"); err != nil {
		t.Fatal(err)
	}
	if err := c.Override("mqtt.receive_maximum", "70000", "flag -r"); err != nil {
		t.Fatal(err)
	}
	want := `flag -r: mqtt.receive_maximum: 70000 out of range (1..65535)`
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate error\n got: %v\nwant: %s", err, want)
	}

	errTests := []struct{ key, value, want string }{
		{"mqtt.nope", "1", `flag -x: unknown key "mqtt.nope"`},
		{"nope.listen", "1", `flag -x: unknown key "nope.listen"`},
		{"mqtt", "1", `flag -x: mqtt: not a single value`},
		{"shared_subscriptions.groups", "1", `flag -x: shared_subscriptions.groups: not a single value`},
		{"mqtt.max_packet_size", "big", `flag -x: mqtt.max_packet_size: "big" is not a size (write a number of bytes, or one with KiB, MiB or GiB: "64KiB")`},
		{"mqtt.connect_timeout", "10", `flag -x: mqtt.connect_timeout: "10" is not a duration (write it like "10s", "500ms" or "1h30m")`},
		{"log_level", "loud", `flag -x: log_level: unknown level "loud" (valid: debug, info, warn, error)`},
		{"mqtt.retain_available", "", `flag -x: mqtt.retain_available: expected true or false, got ""`},
	}
	before := *c.WithDefaults()
	for _, tt := range errTests {
		if err := c.Override(tt.key, tt.value, "flag -x"); err == nil || err.Error() != tt.want {
			t.Errorf("Override(%q, %q) = %v, want %s", tt.key, tt.value, err, tt.want)
		}
	}
	if after := *c.WithDefaults(); !reflect.DeepEqual(after, before) {
		t.Errorf("failed overrides changed the configuration:\n%+v\nwas\n%+v", after, before)
	}
}

func TestOverrideInCode(t *testing.T) {
	var c Config
	for _, kv := range [][2]string{
		{"mqtt.listen", ""}, {"http.listen", "127.0.0.1:0"}, {"data_dir", "/var/lib/linemq"},
		{"node_id", "gw-7"}, {"mqtt.retain_available", "false"}, {"mqtt.topic_alias_maximum", "0"},
		{"log_format", "json"}, {"mqtt.max_queued_total", "unlimited"}, {"node_id", "123"}, {"data_dir", "null"},
	} {
		if err := c.Override(kv[0], kv[1], "test"); err != nil {
			t.Fatalf("Override(%q, %q): %v", kv[0], kv[1], err)
		}
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	e := c.WithDefaults()
	if *e.MQTT.Listen != "" || *e.HTTP.Listen != "127.0.0.1:0" || e.DataDir != "null" || e.NodeID != "123" || e.LogFormat != LogJSON {
		t.Errorf("overrides not applied: %+v", e)
	}
	o := c.BrokerOptions()
	if !o.DisableRetain || o.TopicAliasMaximum != -1 || o.MaxQueuedTotal != -1 {
		t.Errorf("BrokerOptions = %+v", o)
	}
}

// TestOverrideOwnPointers checks that Override does not write through a
// pointer the Config shares with its caller.
func TestOverrideOwnPointers(t *testing.T) {
	addr := "127.0.0.1:1"
	c := Default()
	c.MQTT.Listen = &addr
	if err := c.Override("mqtt.listen", "127.0.0.1:2", "test"); err != nil {
		t.Fatal(err)
	}
	if addr != "127.0.0.1:1" || *c.MQTT.Listen != "127.0.0.1:2" {
		t.Errorf("caller's address %q, config's %q", addr, *c.MQTT.Listen)
	}
	e := c.WithDefaults()
	*e.MQTT.Listen = "changed"
	if *c.MQTT.Listen != "127.0.0.1:2" {
		t.Error("WithDefaults shares pointers with its receiver")
	}
}

func TestDefaults(t *testing.T) {
	def := Default()
	if got := (&Config{}).WithDefaults(); !reflect.DeepEqual(got, def) {
		t.Errorf("Config{}.WithDefaults() = %+v\nwant %+v", got, def)
	}
	for name, c := range map[string]*Config{"zero": {}, "Default": def} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate: %v", name, err)
		}
		if got := c.Level(); got != slog.LevelInfo {
			t.Errorf("%s: Level = %v", name, got)
		}
	}

	want := broker.Options{
		MaxPacketSize:                 1 << 20,
		ReceiveMaximum:                1024,
		TopicAliasMaximum:             1024,
		MaxQueuedMessages:             1000,
		MaxQueuedTotal:                100_000,
		MaxPendingBytes:               1 << 20,
		MaxPendingBytesTotal:          256 << 20,
		MaxClientIDLength:             256,
		MaxTopicLevels:                128,
		MaxTopicLength:                4096,
		PartialPacketTimeout:          30 * time.Second,
		ConnectTimeout:                10 * time.Second,
		MaxConnectSize:                broker.DefaultMaxConnectSize,
		MaxConnectingBytes:            broker.DefaultMaxConnecting,
		WriteTimeout:                  30 * time.Second,
		MaxConnections:                2048,
		MaxSubscriptionsPerClient:     1000,
		MaxSubscriptionBytesPerClient: broker.DefaultMaxSubscriptionBytesPerClient,
		MaxRetainedMessages:           100_000,
		MaxRetainedBytes:              64 << 20,
		MaxSessions:                   10_000,
		Overload:                      "backpressure",
		DeniedSubscriptionReason:      packet.NotAuthorized,
		Shares:                        broker.ShareOptions{Strategy: "round_robin"},
	}
	for name, c := range map[string]*Config{"zero": {}, "Default": def} {
		if got := c.BrokerOptions(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: BrokerOptions = %+v\nwant %+v", name, got, want)
		}
	}
	if *def.MQTT.Listen != ":1883" || *def.HTTP.Listen != ":8080" || def.DataDir != "./data" || def.LogFormat != LogText ||
		bolt.SyncMode(def.Storage.Sync) != bolt.SyncBatch || def.Storage.BatchInterval != Duration(10*time.Millisecond) {
		t.Errorf("Default() = %+v", def)
	}

	// Default returns fresh pointers: changing one result leaves the next alone.
	*def.MQTT.Listen = "changed"
	*def.MQTT.RetainAvailable = false
	if d := Default(); *d.MQTT.Listen != ":1883" || !*d.MQTT.RetainAvailable {
		t.Error("Default() shares pointers between calls")
	}
}

// TestValues checks that values in a file reach the broker's options,
// including the ones whose zero is not the default.
func TestValues(t *testing.T) {
	data := lines(
		"node_id: gw-1",
		"log_level: warn",
		"log_format: json",
		"mqtt:",
		`  listen: ""`,
		"  max_packet_size: 64KiB",
		"  receive_maximum: 1000",
		"  topic_alias_maximum: 0",
		"  max_keepalive: 2m",
		"  max_session_expiry: 24h",
		"  max_queued_messages: 10",
		"  max_queued_total: unlimited",
		"  max_pending_bytes: 4096",
		"  max_pending_bytes_total: 64MiB",
		"  max_client_id_length: 64",
		"  max_topic_levels: 16",
		"  max_topic_length: unlimited",
		"  partial_packet_timeout: 5s",
		"  connect_timeout: 5s",
		"  write_timeout: 1s",
		"  max_connections: 300",
		"  max_publish_rate: 50",
		"  publish_burst: 200",
		"  max_subscriptions_per_client: unlimited",
		"  max_retained_messages: 5000",
		"  max_retained_bytes: 8MiB",
		"  max_sessions: unlimited",
		"  retain_available: false",
		"  wildcard_subscriptions: no",
		"  subscription_identifiers: False",
		"  shared_subscriptions: off",
		"  denied_subscription_reason: unspecified_error",
		"shared_subscriptions:",
		"  strategy: random",
		"  overload: drop_oldest",
		"  groups:",
		"    - name: hist-*",
		"      strategy: hash_topic",
		"      overload: backpressure",
		"      skip_full_members: false",
		"      redispatch_on_disconnect: true",
		"      allowed_clients: [historian-*]",
		"      min_members: 1",
		"      max_members: 2",
		"    - name: work",
		"      max_members: unlimited",
		"storage:",
		"  sync: always",
		"  batch_interval: 50ms",
		"  max_size: 256MiB",
	)
	c, err := Parse([]byte(data), file)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if *c.MQTT.Listen != "" || c.Level() != slog.LevelWarn || c.LogFormat != LogJSON ||
		bolt.SyncMode(c.Storage.Sync) != bolt.SyncAlways || c.Storage.BatchInterval != Duration(50*time.Millisecond) ||
		c.Storage.MaxSize != 256<<20 {
		t.Errorf("config = %+v", c)
	}
	want := broker.Options{
		MaxPacketSize:                 65536,
		ReceiveMaximum:                1000,
		TopicAliasMaximum:             -1,
		MaxKeepAlive:                  2 * time.Minute,
		MaxSessionExpiry:              24 * time.Hour,
		MaxQueuedMessages:             10,
		MaxQueuedTotal:                -1,
		MaxPendingBytes:               4096,
		MaxPendingBytesTotal:          64 << 20,
		MaxClientIDLength:             64,
		MaxTopicLevels:                16,
		MaxTopicLength:                -1,
		PartialPacketTimeout:          5 * time.Second,
		ConnectTimeout:                5 * time.Second,
		MaxConnectSize:                broker.DefaultMaxConnectSize,
		MaxConnectingBytes:            broker.DefaultMaxConnecting,
		WriteTimeout:                  time.Second,
		MaxConnections:                300,
		MaxPublishRate:                50,
		PublishBurst:                  200,
		MaxSubscriptionsPerClient:     -1,
		MaxSubscriptionBytesPerClient: broker.DefaultMaxSubscriptionBytesPerClient,
		MaxRetainedMessages:           5000,
		MaxRetainedBytes:              8 << 20,
		MaxSessions:                   -1,
		DisableRetain:                 true,
		DisableWildcardSubs:           true,
		DisableSubIDs:                 true,
		DisableSharedSubs:             true,
		Overload:                      "backpressure",
		DeniedSubscriptionReason:      packet.UnspecifiedError,
		Shares: broker.ShareOptions{
			Strategy: "random",
			Overload: "drop_oldest",
			Groups: []broker.GroupPolicy{
				{
					Name: "hist-*", Strategy: "hash_topic", Overload: "backpressure", StrictRotation: true,
					RedispatchOnDisconnect: true, AllowedClients: []string{"historian-*"}, MinMembers: 1, MaxMembers: 2,
				},
				{Name: "work", Strategy: "random", Overload: "drop_oldest"},
			},
		},
	}
	if got := c.BrokerOptions(); !reflect.DeepEqual(got, want) {
		t.Errorf("BrokerOptions =\n%+v\nwant\n%+v", got, want)
	}
}

// TestExample loads the example shipped in the documentation: it must be
// valid and its values must be the defaults it claims, plus its one group.
func TestExample(t *testing.T) {
	c, err := Load(example)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.SharedSubscriptions.Groups = []ShareGroup{{
		Name:                   "hist-*",
		Strategy:               "hash_topic",
		SkipFullMembers:        new(true),
		RedispatchOnDisconnect: false,
		AllowedClients:         []string{"historian-*"},
		MinMembers:             1,
		MaxMembers:             1,
	}}
	c.src = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("example =\n%+v\nwant\n%+v", c, want)
	}

	// Every key of the schema is in the example, set or commented out, so
	// that it documents them all.
	text, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range schemaKeys(reflect.TypeFor[Config](), "") {
		name := key[strings.LastIndex(key, ".")+1:]
		if !strings.Contains(string(text), " "+name+":") && !strings.Contains(string(text), "\n"+name+":") {
			t.Errorf("%s is not in %s", key, example)
		}
	}
}

// schemaKeys lists the key paths of the struct type t (a list's items
// written as "[]").
func schemaKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			keys = append(keys, schemaKeys(ft.Elem(), prefix+name+"[].")...)
			continue
		}
		if ft.Kind() == reflect.Struct {
			keys = append(keys, schemaKeys(ft, prefix+name+".")...)
			continue
		}
		keys = append(keys, prefix+name)
	}
	return keys
}

func TestLoadMissing(t *testing.T) {
	_, err := Load("testdata/nonexistent.yaml")
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "testdata/nonexistent.yaml") {
		t.Errorf("Load error = %v, want a not-exist error naming the file", err)
	}
}

// TestHWAndHealthKeys: the hw section's errors name their key under hw.
// and the line, and the health and $SYS keys are checked like the others.
func TestHWAndHealthKeys(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"hw:\n  leds:\n    status:\n      gpio: GPIO99\n", "x.yaml:4: hw.leds.status.gpio:"},
		{"health:\n  probe_interval: 1s\n  probe_timeout: 2s\n", "x.yaml:3: health.probe_timeout: 2s is longer than health.probe_interval"},
		{"mqtt:\n  sys_interval: 10ms\n", "x.yaml:2: mqtt.sys_interval:"},
		{"mqtt:\n  overload: drop_newest\n", "x.yaml:2: mqtt.overload:"},
	} {
		c, err := Parse([]byte(tc.yaml), "x.yaml")
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
	c, err := Parse([]byte("mqtt:\n  sys_interval: 0\n  overload: drop_oldest\n"), "x.yaml")
	if err != nil || c.Validate() != nil {
		t.Fatalf("sys_interval 0 (off) refused: %v / %v", err, c.Validate())
	}
	if o := c.BrokerOptions(); o.Overload != broker.OverloadDropOldest || o.Shares.Overload != "" {
		t.Errorf("overload %q, groups %q", o.Overload, o.Shares.Overload)
	}
}

// TestClusterKeys: the cluster section is off without listen, and when on
// needs an etcd and an address the other nodes can dial.
func TestClusterKeys(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"cluster:\n  listen: \"10.0.0.1:7946\"\n", "x.yaml:1: cluster.etcd: no etcd"},
		{"cluster:\n  listen: \":7946\"\n  etcd:\n    endpoints: [\"http://e:2379\"]\n", "cluster.listen: \":7946\" names no host"},
		{"cluster:\n  listen: \"gw1:7946\"\n  etcd:\n    embed: true\n", "cluster.etcd.peer_listen: required"},
		{"cluster:\n  listen: \"gw1:7946\"\n  etcd:\n    endpoints: [\"e:2379\"]\n", "cluster.etcd.endpoints[0]: \"e:2379\" is not a URL"},
		{"cluster:\n  etcd:\n    embed: true\n", "cluster.listen: not set"},
		{"cluster:\n  listen: \"gw1:7946\"\n  etcd:\n    endpoints: [\"http://e:2379\"]\n  forwards:\n    max_bytes: 10\n", "x.yaml:6: cluster.forwards.max_bytes: 10 out of range"},
		{"cluster:\n  listen: \"gw1:7946\"\n  etcd:\n    endpoints: [\"http://e:2379\"]\n  forwards:\n    max_age: unlimited\n", "cluster.forwards.max_age: cannot be unlimited"},
	} {
		c, err := Parse([]byte(tc.yaml), "x.yaml")
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
	c, err := Parse([]byte("cluster:\n  listen: \":7946\"\n  advertise: \"gw1:7946\"\n  etcd:\n    embed: true\n    peer_listen: http://gw1:2380\n    client_listen: http://gw1:2379\n"), "x.yaml")
	if err != nil || c.Validate() != nil {
		t.Fatalf("a valid embedded cluster refused: %v / %v", err, c.Validate())
	}
	c, err = Parse([]byte("cluster:\n  listen: \"gw1:7946\"\n  etcd:\n    endpoints: [\"http://e:2379\"]\n  forwards:\n    max_bytes: 8MiB\n    max_age: 2h\n"), "x.yaml")
	if err != nil || c.Validate() != nil {
		t.Fatalf("forward bounds refused: %v / %v", err, c.Validate())
	}
	if f := c.BrokerOptions().Forwards; f.MaxBytes != 8<<20 || f.MaxAge != 2*time.Hour {
		t.Errorf("broker.Options.Forwards = %+v, want 8 MiB and 2h", f)
	}
}

// TestUnknownKeyHints: an unknown key names the key it most likely means:
// a misspelling of a key of the same section, or a key of another section
// (wrong indentation); a tab in the indentation is named as such.
func TestUnknownKeyHints(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"mqtt:\n  recieve_maximum: 10\n", `x.yaml:2: unknown key "mqtt.recieve_maximum"; did you mean "mqtt.receive_maximum"?`},
		{"receive_maximum: 10\n", `x.yaml:1: unknown key "receive_maximum"; it is a key of "mqtt" (mqtt.receive_maximum): check its indentation`},
		{"listeners:\n  - type: tcp\n    adress: \":1883\"\n", `x.yaml:3: unknown key "listeners[0].adress"; did you mean "listeners[0].address"?`},
		{"mqtt:\n  frobnicate: 1\n", `x.yaml:2: unknown key "mqtt.frobnicate"`},
		{"mqtt:\n\tlisten: \":1883\"\n", "a tab indents this line or the next; YAML indents with spaces only"},
	} {
		_, err := Parse([]byte(tc.yaml), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
		if strings.Contains(tc.want, "frobnicate") && strings.Contains(err.Error(), ";") {
			t.Errorf("%q: a hint for a key like no other: %v", tc.yaml, err)
		}
	}
}

// TestAliasBomb: a short file of aliases can stand for millions of
// values; the walker stops and says so rather than visit them all.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("shared_subscriptions:\n  groups:\n    - &g {name: a, allowed_clients: &c [")
	b.WriteString(strings.Repeat("x, ", 1100) + "x]}\n")
	b.WriteString(strings.Repeat("    - *g\n", 100))
	_, err := Parse([]byte(b.String()), file)
	if err == nil || !strings.Contains(err.Error(), "too many values") {
		t.Fatalf("Parse: %.300v", err)
	}
}
