package mosquitto_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/mosquitto"
	"github.com/linemq/linemq/internal/certtest"
)

// files writes what the corpus's configurations name: a password file, an
// ACL file, a CA and a certificate with its key; it returns their paths.
type files struct{ dir, passwd, acl, ca, cert, key string }

func writeFiles(t *testing.T) files {
	t.Helper()
	dir := t.TempDir()
	h, err := auth.NewHash([]byte("secret"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	f := files{dir: dir, passwd: filepath.Join(dir, "passwd"), acl: filepath.Join(dir, "acl")}
	write(t, f.passwd, "plc-1:"+h+"\n")
	write(t, f.acl, "user plc-1\ntopic readwrite plant/#\n")
	ca := certtest.NewCA(t, "plant CA")
	f.ca = ca.File
	f.cert, f.key = ca.Files(t, "gw1.plant.local")
	return f
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCorpus imports small realistic Mosquitto configurations; each
// output must load and validate as a linemq configuration as it is, hold
// what the case wants, and list exactly the directives it names as not
// carried over.
func TestCorpus(t *testing.T) {
	f := writeFiles(t)
	cases := []struct {
		name  string
		conf  string
		want  []string // in the output
		notes []string // directives not carried over, in order
	}{
		{
			name: "local only",
			conf: "# nothing but comments\n",
			want: []string{"address: 127.0.0.1:1883", "allow_anonymous: true"},
		},
		{
			name: "passwords and ACL on one port",
			conf: fmt.Sprintf("listener 1883\npassword_file %s\nacl_file %s\n", f.passwd, f.acl),
			want: []string{"type: tcp", "address: :1883", "password_file: " + f.passwd, "acl_file: " + f.acl, "acl_overlap: filter", "allow_anonymous: false"},
		},
		{
			name: "TLS with client certificates beside loopback",
			conf: fmt.Sprintf("per_listener_settings true\nlistener 1883 127.0.0.1\nallow_anonymous true\n"+
				"listener 8883\ncertfile %s\nkeyfile %s\ncafile %s\nrequire_certificate true\nuse_identity_as_username true\n"+
				"max_connections 200\ntls_version tlsv1.2\nallow_anonymous false\n", f.cert, f.key, f.ca),
			want:  []string{"address: 127.0.0.1:1883", "allow_anonymous: true", "type: tls", "require_client_cert: true", "max_connections: 200"},
			notes: []string{"tls_version"},
		},
		{
			name:  "websockets for the HMI",
			conf:  fmt.Sprintf("listener 1883\nlistener 9001\nprotocol websockets\npassword_file %s\n", f.passwd),
			want:  []string{"type: ws", "address: :9001"},
			notes: []string{"protocol websockets"},
		},
		{
			name: "limits and persistence",
			conf: "listener 1883\nallow_anonymous true\npersistence true\npersistence_location /var/lib/mosquitto/\nautosave_interval 1800\n" +
				"max_queued_messages 5000\nmax_inflight_messages 40\nmessage_size_limit 262144\nmax_keepalive 120\nsys_interval 30\n" +
				"queue_qos0_messages true\nlog_dest syslog\nuser mosquitto\nmax_connections -1\n",
			want: []string{"max_queued_messages: 5000", "max_keepalive: 120s", "sys_interval: 30s", "queue_qos0_messages: true",
				"max_packet_size: 328704"},
			notes: []string{"persistence_location", "autosave_interval", "max_inflight_messages", "log_dest", "user"},
		},
		{
			name: "an uplink bridge over TLS",
			conf: fmt.Sprintf("listener 1883\nallow_anonymous true\nconnection cloud\naddress broker.example.com:8883\n"+
				"remote_clientid gw1-uplink\nremote_username gw1\nremote_password s3cret\nbridge_cafile %s\n"+
				"bridge_protocol_version mqttv50\nkeepalive_interval 60\ncleansession false\ntry_private true\n"+
				"topic plant/# out 1 \"\" site/gw1/\ntopic cmd/# in 2 gw1/ site/gw1/\n", f.ca),
			want: []string{"name: cloud", "tls://broker.example.com:8883", "protocol: 5", "client_id: gw1-uplink",
				"filter: plant/#", "prefix: site/gw1/", "filter: site/gw1/cmd/#", "strip: site/gw1/", "prefix: gw1/", "ca_file: " + f.ca},
			notes: []string{"try_private", "topic"},
		},
		{
			name:  "a bridge without TLS, default port, both ways",
			conf:  "listener 1883\nallow_anonymous true\nconnection site broker\naddress 10.0.0.5\ntopic line/# both 0\nbridge_protocol_version mqttv31\n",
			want:  []string{"name: site", "10.0.0.5:1883", "protocol: 5", "filter: line/#"},
			notes: []string{"connection", "bridge_protocol_version"},
		},
		{
			name: "include_dir",
			conf: "include_dir " + filepath.Join(f.dir, "conf.d") + "\n",
			want: []string{"address: :1884", "max_keepalive: 60s"},
		},
	}
	if err := os.MkdirAll(filepath.Join(f.dir, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.dir, "conf.d", "a-listener.conf"), "listener 1884\nallow_anonymous true\n")
	write(t, filepath.Join(f.dir, "conf.d", "b-limits.conf"), "max_keepalive 60\n")
	write(t, filepath.Join(f.dir, "conf.d", "ignored.txt"), "this is no configuration\n")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mosquitto.conf")
			write(t, path, c.conf)
			res, err := mosquitto.Import(path)
			if err != nil {
				t.Fatal(err)
			}
			out := string(res.YAML)
			cfg, err := config.Parse(res.YAML, "linemq.yaml")
			if err != nil {
				t.Fatalf("the output does not load: %v\n%s", err, out)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("the output does not validate: %v\n%s", err, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			var got []string
			for _, n := range res.Notes {
				got = append(got, n.Directive)
				if n.Why == "" || n.Line == 0 {
					t.Errorf("note without a line or a reason: %+v", n)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.notes) {
				t.Errorf("notes on %v, want %v: %v", got, c.notes, res.Notes)
			}
		})
	}
}

// TestDebianExample imports the example configuration Debian's mosquitto
// package ships (every directive commented out: Mosquitto's defaults).
func TestDebianExample(t *testing.T) {
	const example = "/usr/share/doc/mosquitto/examples/mosquitto.conf"
	if _, err := os.Stat(example); err != nil {
		t.Skipf("%s: %v (apt-get install mosquitto; CI does)", example, err)
	}
	res, err := mosquitto.Import(example)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(res.YAML, "linemq.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, res.YAML)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%v\n%s", err, res.YAML)
	}
	if len(cfg.Listeners) != 1 || cfg.Listeners[0].Address != "127.0.0.1:1883" {
		t.Errorf("listeners %+v, want Mosquitto 2's local-only default, 127.0.0.1:1883", cfg.Listeners)
	}
	if len(res.Notes) != 0 {
		t.Errorf("notes %v for a file of comments", res.Notes)
	}
}

// TestRefused: a line Mosquitto would refuse is an error naming the file
// and line; a file that cannot be read is one too.
func TestRefused(t *testing.T) {
	for conf, want := range map[string]string{
		"listener\n":                       "mosquitto.conf:1: listener: a value is needed",
		"connection b\ntopic x sideways\n": "mosquitto.conf:2: topic: direction \"sideways\"",
		"connection b\ntopic x out 7\n":    "mosquitto.conf:2: topic: QoS \"7\"",
		"\n\nmax_packet_size lots\n":       "mosquitto.conf:3: max_packet_size: \"lots\" is not a number",
	} {
		path := filepath.Join(t.TempDir(), "mosquitto.conf")
		write(t, path, conf)
		_, err := mosquitto.Import(path)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %q", conf, err, want)
		}
	}
	if _, err := mosquitto.Import(filepath.Join(t.TempDir(), "missing.conf")); err == nil {
		t.Error("a missing file imported")
	}
}
