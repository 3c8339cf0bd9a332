package gateway_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/gateway/listen"
)

// TestAuthAndListenersWired: a password file and an extra listener from
// the configuration are in force on every listener; Reload (SIGHUP) takes a
// changed password file without dropping a connected client.
func TestAuthAndListenersWired(t *testing.T) {
	dir := t.TempDir()
	pwfile := filepath.Join(dir, "passwd")
	line := func(user, pw string) string {
		h, err := auth.NewHash([]byte(pw), 1000)
		if err != nil {
			t.Fatal(err)
		}
		return user + ":" + h + "\n"
	}
	if err := os.WriteFile(pwfile, []byte(line("alice", "a-secret")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Auth.PasswordFile = pwfile
	cfg.Listeners = listen.Configs{{Type: listen.TCP, Address: "127.0.0.1:0"}}
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	extra := listenerAddr(t, g)

	login := func(addr, user, pw string) (*brokertest.Client, packet.ReasonCode) {
		c, ack := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V5, ClientID: []byte(user + "-c"), CleanStart: true,
			UsernameFlag: user != "", Username: []byte(user), PasswordFlag: pw != "", Password: []byte(pw)})
		return c, ack.Reason
	}
	for _, addr := range []string{g.MQTTAddr().String(), extra} {
		if _, rc := login(addr, "alice", "wrong"); rc != packet.BadUsernameOrPassword {
			t.Errorf("%s: wrong password: %v, want 0x86", addr, rc)
		}
		if _, rc := login(addr, "", ""); rc != packet.NotAuthorized {
			t.Errorf("%s: anonymous with a password file: %v, want 0x87", addr, rc)
		}
	}
	alice, rc := login(extra, "alice", "a-secret")
	if rc != packet.Success {
		t.Fatalf("alice: %v", rc)
	}
	if err := os.WriteFile(pwfile, []byte(line("alice", "a-secret")+line("bob", "b-secret")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, rc := login(g.MQTTAddr().String(), "bob", "b-secret"); rc != packet.Success {
		t.Fatalf("bob after reload: %v", rc)
	}
	alice.Send(packet.AppendPingreq(nil))
	alice.Expect(packet.PINGRESP, nil) // still connected
}

// listenerAddr returns the address of the gateway's configured listener,
// from its status page's list.
func listenerAddr(t *testing.T, g *gateway.Gateway) string {
	t.Helper()
	for _, l := range g.Listeners() {
		if l.String() != g.MQTTAddr().String() {
			return l.String()
		}
	}
	t.Fatal("no configured listener")
	return ""
}
