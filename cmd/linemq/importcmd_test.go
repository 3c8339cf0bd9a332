package main

import (
	"bytes"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/gateway/auth"
)

// TestImportMosquittoStarts: `linemq import-mosquitto` turns a Mosquitto
// configuration (password and ACL files, a loopback listener, a WebSocket
// one, a directive it cannot carry) into a linemq.yaml the daemon starts
// on as it is; the password file is honoured, and the directive not
// carried over is named on standard error with its line.
func TestImportMosquittoStarts(t *testing.T) {
	dir := t.TempDir()
	h, err := auth.NewHash([]byte("secret"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	passwd, acl := filepath.Join(dir, "passwd"), filepath.Join(dir, "acl")
	writeFile(t, passwd, "hmi:"+h+"\n")
	writeFile(t, acl, "user hmi\ntopic readwrite plant/#\ntopic deny plant/line3/recipes/#\n")
	conf := filepath.Join(dir, "mosquitto.conf")
	// Port 0 is not Mosquitto's, but carried over as it is it lets the
	// system choose, as every test here does.
	writeFile(t, conf, "listener 0 127.0.0.1\nlistener 0 127.0.0.1\nprotocol websockets\n"+
		"password_file "+passwd+"\nacl_file "+acl+"\nmax_inflight_messages 20\n")

	cmd := exec.Command(binary, "import-mosquitto", conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("import-mosquitto: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "mosquitto.conf:6: max_inflight_messages:") {
		t.Errorf("standard error does not name line 6's max_inflight_messages:\n%s", stderr.String())
	}
	cfg := filepath.Join(dir, "linemq.yaml")
	writeFile(t, cfg, stdout.String())

	d := start(t, "-config", cfg, "-http-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "data"))
	m := d.waitLine(t, regexp.MustCompile(`msg=ready .*listeners="([^"]*)"`), 30*time.Second)
	ls := strings.Fields(m[1])
	if len(ls) != 2 || !strings.HasPrefix(ls[0], "mqtt://") || !strings.HasPrefix(ls[1], "ws://") {
		t.Fatalf("listeners=%q, want an mqtt:// and a ws:// one", m[1])
	}
	u, err := url.Parse(ls[0])
	if err != nil {
		t.Fatal(err)
	}
	c := &packet.Connect{Version: packet.V5, ClientID: []byte("hmi-1"), CleanStart: true, UsernameFlag: true, Username: []byte("hmi"), PasswordFlag: true, Password: []byte("wrong")}
	if _, ack := brokertest.Connect(t, u.Host, c); ack.Reason != packet.BadUsernameOrPassword {
		t.Errorf("a wrong password: CONNACK %v, want 0x86", ack.Reason)
	}
	c.Password = []byte("secret")
	hmi, ack := brokertest.Connect(t, u.Host, c)
	if ack.Reason != packet.Success {
		t.Fatalf("the password from the Mosquitto file: CONNACK %v, want success", ack.Reason)
	}
	// Mosquitto grants a filter that reaches a denied topic, and so does
	// the imported configuration (auth.acl_overlap: filter).
	sa := hmi.Subscribe(&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("plant/#"), QoS: 1}}})
	if len(sa.Reasons) != 1 || sa.Reasons[0] != packet.GrantedQoS1 {
		t.Errorf("plant/# beside a deny rule: SUBACK %v, want granted as on Mosquitto", sa.Reasons)
	}
}
