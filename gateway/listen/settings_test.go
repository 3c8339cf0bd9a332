package listen

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/gateway/auth"
)

// TestListenerMaxPacketSize: a listener's max_packet_size is advertised in
// its clients' CONNACK and enforced (DISCONNECT 0x95), while another
// listener of the same broker keeps the broker's bound.
func TestListenerMaxPacketSize(t *testing.T) {
	small := listen(t, Config{Type: TCP, MaxPacketSize: 1024}, Options{})
	big := listen(t, Config{Type: TCP}, Options{})
	serve(t, newAuth(t, auth.Config{AllowAnonymous: new(true)}), broker.Options{}, small, big)

	payload := strings.Repeat("x", 2000)
	for _, tc := range []struct {
		l       *Listener
		max     uint32
		refused bool
	}{{small, 1024, true}, {big, broker.DefaultMaxPacketSize, false}} {
		c, ca := brokertest.Connect(t, tc.l.Addr().String(), &packet.Connect{Version: packet.V5, ClientID: []byte("c"), CleanStart: true})
		if ca.Props.MaximumPacketSize != tc.max {
			t.Errorf("%s: CONNACK Maximum Packet Size %d, want %d", tc.l.Addr(), ca.Props.MaximumPacketSize, tc.max)
		}
		c.Publish(&packet.Publish{Topic: []byte("t"), QoS: 1, PacketID: 1, Payload: []byte(payload)})
		if tc.refused {
			c.ExpectDisconnect(packet.PacketTooLarge)
		} else {
			c.Expect(packet.PUBACK, nil)
		}
	}
}

func TestSizeParse(t *testing.T) {
	for in, want := range map[string]Size{"100": 100, "64KiB": 64 << 10, "1MiB": 1 << 20} {
		var z Size
		if err := yaml.Unmarshal([]byte(in), &z); err != nil || z != want {
			t.Errorf("%q: %d %v, want %d", in, z, err, want)
		}
	}
	for _, in := range []string{"0", "-1", "1GiB", "lots", "300MiB"} {
		var z Size
		if err := yaml.Unmarshal([]byte(in), &z); err == nil {
			t.Errorf("%q accepted as %d", in, z)
		}
	}
}

// TestListenerAllowAnonymous: a listener's allow_anonymous replaces
// auth.allow_anonymous for its clients, in both directions, over plain
// TCP (the only transport here whose address carries nothing else).
func TestListenerAllowAnonymous(t *testing.T) {
	closed := listen(t, Config{Type: TCP, AllowAnonymous: new(false)}, Options{})
	open := listen(t, Config{Type: TCP, AllowAnonymous: new(true)}, Options{})
	plain := listen(t, Config{Type: TCP}, Options{})
	dir := t.TempDir()
	pw := dir + "/passwd"
	if err := os.WriteFile(pw, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// With a password file, anonymous clients are refused unless a
	// listener lets them in.
	serve(t, newAuth(t, auth.Config{PasswordFile: pw}), broker.Options{}, closed, open, plain)
	for _, tc := range []struct {
		l    *Listener
		want packet.ReasonCode
	}{{closed, packet.NotAuthorized}, {open, packet.Success}, {plain, packet.NotAuthorized}} {
		_, ca := brokertest.Connect(t, tc.l.Addr().String(), &packet.Connect{Version: packet.V5, ClientID: []byte("anon"), CleanStart: true})
		if ca.Reason != tc.want {
			t.Errorf("%s: CONNACK %v, want %v", tc.l.Addr(), ca.Reason, tc.want)
		}
	}
}
