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
	"github.com/linemq/linemq/broker/share"
)

const file = "linemq.yaml"

// lines joins its arguments as the lines of a file, so that the tests can
// count line numbers by eye.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

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
			want: `linemq.yaml:7: unknown key "mqtt.recieve_maximum"`,
		},
		{
			name: "unknown top-level key",
			yaml: lines("log_level: info", "loglevel: debug"),
			want: `linemq.yaml:2: unknown key "loglevel"`,
		},
		{
			name: "unknown key in a list item",
			yaml: lines(
				"shared_subscriptions:",
				"  groups:",
				"    - name: a",
				"    - name: b",
				"      stratgy: random",
			),
			want: `linemq.yaml:5: unknown key "shared_subscriptions.groups[1].stratgy"`,
		},
		{
			name: "every unknown key is reported",
			yaml: lines("mqtt:", "  lisen: x", "htp:", "  listen: y"),
			want: `linemq.yaml:2: unknown key "mqtt.lisen"` + "\n" +
				`linemq.yaml:3: unknown key "htp"`,
		},
		{
			name: "repeated key",
			yaml: lines("mqtt:", "  listen: a:1", "  listen: b:2"),
			want: `linemq.yaml:3: mqtt.listen: repeated key (first set at line 2)`,
		},
		{
			name: "not an integer",
			yaml: lines("mqtt:", "  max_packet_size: big"),
			want: `linemq.yaml:2: mqtt.max_packet_size: "big" is not an integer`,
		},
		{
			name: "float for an integer",
			yaml: lines("mqtt:", "  receive_maximum: 1.5"),
			want: `linemq.yaml:2: mqtt.receive_maximum: "1.5" is not an integer`,
		},
		{
			name: "integer too large",
			yaml: lines("mqtt:", "  max_pending_bytes: 99999999999999999999"),
			want: `linemq.yaml:2: mqtt.max_pending_bytes: 99999999999999999999 is too large`,
		},
		{
			name: "duration without unit",
			yaml: lines("mqtt:", "  connect_timeout: 10"),
			want: `linemq.yaml:2: mqtt.connect_timeout: "10" is not a duration (write it like "10s", "500ms" or "1h30m")`,
		},
		{
			name: "not a boolean",
			yaml: lines("mqtt:", "  retain_available: maybe"),
			want: `linemq.yaml:2: mqtt.retain_available: "maybe" is not true or false`,
		},
		{
			name: "not a boolean in a list item",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      skip_full_members: 2"),
			want: `linemq.yaml:4: shared_subscriptions.groups[0].skip_full_members: "2" is not true or false`,
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
			name: "mapping in a string list",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      allowed_clients:", "        - {id: x}"),
			want: `linemq.yaml:5: shared_subscriptions.groups[0].allowed_clients[0]: expected a string, got a mapping`,
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
			name: "syntax error",
			yaml: lines("mqtt:", "\tlisten: x"),
			want: `linemq.yaml:2: found character that cannot start any token`,
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

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{
			name: "unknown group strategy",
			yaml: lines(
				"node_id: gw-1",
				"mqtt:",
				`  listen: ":1883"`,
				"http:",
				`  listen: ":8080"`,
				"",
				"# Historians see every message of their topics.",
				"shared_subscriptions:",
				"  strategy: round_robin",
				"  groups:",
				`    - name: "hist-*"`,
				"      strategy: fastest",
			),
			want: `linemq.yaml:12: shared_subscriptions.groups[0].strategy: unknown strategy "fastest" (valid: round_robin, random, sticky, hash_clientid, hash_topic, prefer_local)`,
		},
		{
			name: "unknown overload mode",
			yaml: lines("shared_subscriptions:", "  overload: block", "  groups:", "    - name: g", "      overload: drop_newest"),
			want: `linemq.yaml:2: shared_subscriptions.overload: unknown value "block" (valid: backpressure, drop_oldest)` + "\n" +
				`linemq.yaml:5: shared_subscriptions.groups[0].overload: unknown value "drop_newest" (valid: backpressure, drop_oldest)`,
		},
		{
			name: "unknown default strategy",
			yaml: lines("shared_subscriptions:", "  strategy: RoundRobin"),
			want: `linemq.yaml:2: shared_subscriptions.strategy: unknown strategy "RoundRobin" (valid: round_robin, random, sticky, hash_clientid, hash_topic, prefer_local)`,
		},
		{
			name: "log level",
			yaml: lines("log_level: verbose"),
			want: `linemq.yaml:1: log_level: unknown level "verbose" (valid: debug, info, warn, error)`,
		},
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
			name: "storage sync",
			yaml: lines("storage:", "  sync: sometimes"),
			want: `linemq.yaml:2: storage.sync: unknown value "sometimes" (valid: always, batch, none)`,
		},
		{
			name: "batch interval negative",
			yaml: lines("storage:", "  batch_interval: -1ms"),
			want: `linemq.yaml:2: storage.batch_interval: must not be negative (got -1ms)`,
		},
		{
			name: "max packet size too large",
			yaml: lines("mqtt:", "  max_packet_size: 268435461"),
			want: `linemq.yaml:2: mqtt.max_packet_size: 268435461 out of range (0..268435460)`,
		},
		{
			name: "max packet size negative",
			yaml: lines("mqtt:", "  max_packet_size: -1"),
			want: `linemq.yaml:2: mqtt.max_packet_size: -1 out of range (0..268435460)`,
		},
		{
			name: "receive maximum zero",
			yaml: lines("mqtt:", "  receive_maximum: 0"),
			want: `linemq.yaml:2: mqtt.receive_maximum: 0 out of range (1..65535)`,
		},
		{
			name: "receive maximum too large",
			yaml: lines("mqtt:", "  receive_maximum: 65536"),
			want: `linemq.yaml:2: mqtt.receive_maximum: 65536 out of range (1..65535)`,
		},
		{
			name: "receive maximum negative",
			yaml: lines("mqtt:", "  receive_maximum: -5"),
			want: `linemq.yaml:2: mqtt.receive_maximum: -5 out of range (1..65535)`,
		},
		{
			name: "topic alias maximum too large",
			yaml: lines("mqtt:", "  topic_alias_maximum: 65536"),
			want: `linemq.yaml:2: mqtt.topic_alias_maximum: 65536 out of range (0..65535)`,
		},
		{
			name: "topic alias maximum negative",
			yaml: lines("mqtt:", "  topic_alias_maximum: -1"),
			want: `linemq.yaml:2: mqtt.topic_alias_maximum: -1 out of range (0..65535)`,
		},
		{
			name: "keep alive too long",
			yaml: lines("mqtt:", "  max_keepalive: 65536s"),
			want: `linemq.yaml:2: mqtt.max_keepalive: 18h12m16s out of range (0s..65535s)`,
		},
		{
			name: "keep alive negative",
			yaml: lines("mqtt:", "  max_keepalive: -1s"),
			want: `linemq.yaml:2: mqtt.max_keepalive: -1s out of range (0s..65535s)`,
		},
		{
			name: "keep alive not whole seconds",
			yaml: lines("mqtt:", "  max_keepalive: 1500ms"),
			want: `linemq.yaml:2: mqtt.max_keepalive: 1.5s is not a whole number of seconds`,
		},
		{
			name: "session expiry too long",
			yaml: lines("mqtt:", "  max_session_expiry: 4294967296s"),
			want: `linemq.yaml:2: mqtt.max_session_expiry: 1193046h28m16s out of range (0s..4294967295s)`,
		},
		{
			name: "queued messages negative",
			yaml: lines("mqtt:", "  max_queued_messages: -1"),
			want: `linemq.yaml:2: mqtt.max_queued_messages: must not be negative (got -1)`,
		},
		{
			name: "pending bytes negative",
			yaml: lines("mqtt:", "  max_pending_bytes: -1"),
			want: `linemq.yaml:2: mqtt.max_pending_bytes: must not be negative (got -1)`,
		},
		{
			name: "client id length too large",
			yaml: lines("mqtt:", "  max_client_id_length: 65536"),
			want: `linemq.yaml:2: mqtt.max_client_id_length: 65536 out of range (0..65535)`,
		},
		{
			name: "connect timeout negative",
			yaml: lines("mqtt:", "  connect_timeout: -10s"),
			want: `linemq.yaml:2: mqtt.connect_timeout: must not be negative (got -10s)`,
		},
		{
			name: "write timeout negative",
			yaml: lines("mqtt:", "  write_timeout: -1s"),
			want: `linemq.yaml:2: mqtt.write_timeout: must not be negative (got -1s)`,
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
			name: "max members negative",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      max_members: -1"),
			want: `linemq.yaml:4: shared_subscriptions.groups[0].max_members: must not be negative (got -1)`,
		},
		{
			name: "min members above max",
			yaml: lines("shared_subscriptions:", "  groups:", "    - name: a", "      min_members: 3", "      max_members: 1"),
			want: `linemq.yaml:4: shared_subscriptions.groups[0].min_members: 3 exceeds max_members (1)`,
		},
		{
			name: "several errors",
			yaml: lines("log_level: loud", "mqtt:", "  receive_maximum: 0", "storage:", "  sync: never"),
			want: `linemq.yaml:1: log_level: unknown level "loud" (valid: debug, info, warn, error)` + "\n" +
				`linemq.yaml:3: mqtt.receive_maximum: 0 out of range (1..65535)` + "\n" +
				`linemq.yaml:5: storage.sync: unknown value "never" (valid: always, batch, none)`,
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

func TestErrorValues(t *testing.T) {
	_, err := Parse([]byte("mqtt:\n  recieve_maximum: 1\n"), file)
	var ce *Error
	if !errors.As(err, &ce) || !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Parse error %#v: want an *Error wrapping ErrUnknownKey", err)
	}
	if want := (Error{File: file, Line: 2, Key: "mqtt.recieve_maximum", Err: ErrUnknownKey}); *ce != want {
		t.Errorf("got %+v, want %+v", *ce, want)
	}

	c, err := Parse([]byte("shared_subscriptions:\n  strategy: fastest\n"), file)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if !errors.Is(err, share.ErrUnknownStrategy) {
		t.Errorf("Validate error %v does not wrap share.ErrUnknownStrategy", err)
	}
}

// TestValidateInCode checks errors about a Config built in code: they name
// the key but no file or line.
func TestValidateInCode(t *testing.T) {
	c := &Config{}
	c.MQTT.ReceiveMaximum = 70000
	c.SharedSubscriptions.Groups = []ShareGroup{{Strategy: "fastest", Name: "g"}}
	want := `mqtt.receive_maximum: 70000 out of range (1..65535)` + "\n" +
		`shared_subscriptions.groups[0].strategy: unknown strategy "fastest" (valid: round_robin, random, sticky, hash_clientid, hash_topic, prefer_local)`
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
	if err := c.Override("log_level", "loud", "flag -log-level"); err != nil {
		t.Fatal(err)
	}
	want := `flag -log-level: log_level: unknown level "loud" (valid: debug, info, warn, error)`
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate error\n got: %v\nwant: %s", err, want)
	}

	errTests := []struct{ key, value, want string }{
		{"mqtt.nope", "1", `flag -x: unknown key "mqtt.nope"`},
		{"nope.listen", "1", `flag -x: unknown key "nope.listen"`},
		{"mqtt", "1", `flag -x: mqtt: not a single value`},
		{"shared_subscriptions.groups", "1", `flag -x: shared_subscriptions.groups: not a single value`},
		{"mqtt.max_packet_size", "big", `flag -x: mqtt.max_packet_size: "big" is not an integer`},
		{"mqtt.connect_timeout", "10", `flag -x: mqtt.connect_timeout: "10" is not a duration (write it like "10s", "500ms" or "1h30m")`},
	}
	for _, tt := range errTests {
		if err := c.Override(tt.key, tt.value, "flag -x"); err == nil || err.Error() != tt.want {
			t.Errorf("Override(%q, %q) = %v, want %s", tt.key, tt.value, err, tt.want)
		}
	}
}

func TestOverrideInCode(t *testing.T) {
	var c Config
	for _, kv := range [][2]string{
		{"mqtt.listen", ""}, {"http.listen", "127.0.0.1:0"}, {"data_dir", "/var/lib/linemq"},
		{"node_id", "gw-7"}, {"mqtt.retain_available", "false"}, {"mqtt.topic_alias_maximum", "0"},
	} {
		if err := c.Override(kv[0], kv[1], "test"); err != nil {
			t.Fatalf("Override(%q, %q): %v", kv[0], kv[1], err)
		}
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	e := c.WithDefaults()
	if *e.MQTT.Listen != "" || *e.HTTP.Listen != "127.0.0.1:0" || e.DataDir != "/var/lib/linemq" || e.NodeID != "gw-7" {
		t.Errorf("overrides not applied: %+v", e)
	}
	o := c.BrokerOptions()
	if !o.DisableRetain || o.TopicAliasMaximum != -1 || o.NodeID != "gw-7" {
		t.Errorf("BrokerOptions = %+v", o)
	}
}

func TestDefaults(t *testing.T) {
	def := Default()
	for _, data := range []string{"", "# only a comment\n", "---\n", "mqtt:\n", "mqtt:\n  listen:\n  retain_available: ~\n", "---\n...\n", "log_level: info\n---\n"} {
		c, err := Parse([]byte(data), file)
		if err != nil {
			t.Fatalf("Parse(%q): %v", data, err)
		}
		c.src = nil
		if !reflect.DeepEqual(c, def) {
			t.Errorf("Parse(%q) = %+v\nwant Default() = %+v", data, c, def)
		}
	}
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

	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "linemq"
	}
	want := broker.Options{
		NodeID:            host,
		MaxPacketSize:     1 << 20,
		ReceiveMaximum:    1024,
		TopicAliasMaximum: 1024,
		MaxQueuedMessages: 1000,
		MaxPendingBytes:   1 << 20,
		MaxClientIDLength: 256,
		ConnectTimeout:    10 * time.Second,
		WriteTimeout:      30 * time.Second,
		Shares:            broker.ShareOptions{Strategy: "round_robin", Overload: "backpressure"},
	}
	for name, c := range map[string]*Config{"zero": {}, "Default": def} {
		if got := c.BrokerOptions(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: BrokerOptions = %+v\nwant %+v", name, got, want)
		}
	}
	if *def.MQTT.Listen != ":1883" || *def.HTTP.Listen != ":8080" || def.DataDir != "./data" ||
		def.Storage.Sync != "batch" || def.Storage.BatchInterval != 10*time.Millisecond {
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
		"mqtt:",
		`  listen: ""`,
		"  max_packet_size: 0x10000",
		"  receive_maximum: 1_000",
		"  topic_alias_maximum: 0",
		"  max_keepalive: 2m",
		"  max_session_expiry: 24h",
		"  max_queued_messages: 10",
		"  max_pending_bytes: 4096",
		"  max_client_id_length: 64",
		"  connect_timeout: 5s",
		"  write_timeout: 1s",
		"  retain_available: false",
		"  wildcard_subscriptions: no",
		"  subscription_identifiers: False",
		"  shared_subscriptions: off",
		"shared_subscriptions:",
		"  strategy: random",
		"  groups:",
		"    - name: hist-*",
		"      strategy: hash_topic",
		"      skip_full_members: false",
		"      redispatch_on_disconnect: true",
		"      allowed_clients: [historian-*]",
		"      min_members: 1",
		"      max_members: 2",
		"    - name: work",
		"storage:",
		"  sync: always",
	)
	c, err := Parse([]byte(data), file)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if *c.MQTT.Listen != "" || c.Level() != slog.LevelWarn || c.Storage.Sync != "always" {
		t.Errorf("config = %+v", c)
	}
	want := broker.Options{
		NodeID:              "gw-1",
		MaxPacketSize:       65536,
		ReceiveMaximum:      1000,
		TopicAliasMaximum:   -1,
		MaxKeepAlive:        2 * time.Minute,
		MaxSessionExpiry:    24 * time.Hour,
		MaxQueuedMessages:   10,
		MaxPendingBytes:     4096,
		MaxClientIDLength:   64,
		ConnectTimeout:      5 * time.Second,
		WriteTimeout:        time.Second,
		DisableRetain:       true,
		DisableWildcardSubs: true,
		DisableSubIDs:       true,
		DisableSharedSubs:   true,
		Shares: broker.ShareOptions{
			Strategy: "random",
			Overload: "backpressure",
			Groups: []broker.GroupPolicy{
				{
					Name: "hist-*", Strategy: "hash_topic", StrictRotation: true, RedispatchOnDisconnect: true,
					AllowedClients: []string{"historian-*"}, MinMembers: 1, MaxMembers: 2,
				},
				{Name: "work", Strategy: "random"},
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
	c, err := Load("testdata/linemq.example.yaml")
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
}

func TestLoadMissing(t *testing.T) {
	_, err := Load("testdata/nonexistent.yaml")
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "testdata/nonexistent.yaml") {
		t.Errorf("Load error = %v, want a not-exist error naming the file", err)
	}
}

// TestOverflowInt checks that a value that fits int64 but not the platform's
// int is refused, not wrapped (int is 32 bits on ARMv7).
func TestOverflowInt(t *testing.T) {
	var n int8
	err := setScalar(reflect.ValueOf(&n).Elem(), "300")
	if err == nil || err.Error() != "300 is too large" {
		t.Errorf("setScalar(int8, 300) = %v", err)
	}
}
