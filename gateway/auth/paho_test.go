package auth

import (
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/internal/mqtttest"
)

// TestPahoInteropACL checks the configuration docs/security.md gives for
// the Paho interoperability suites, over a real socket with the suites'
// own topics and wildcards.
func TestPahoInteropACL(t *testing.T) {
	yes := true
	a := newAuth(t, Config{ACLFile: "testdata/paho-interop.acl", AllowAnonymous: &yes}, Options{})
	addr := runBroker(t, a)
	c, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "myclientid", CleanStart: true, KeepAlive: 30}, nil)
	var opts []paho.SubscribeOptions
	for _, f := range []string{"test/nosubscribe", "TopicA/+", "+/C", "#", "/#", "/+", "+/+", "TopicA/#", "$share/sharename/TopicA"} {
		opts = append(opts, paho.SubscribeOptions{Topic: f, QoS: 2})
	}
	sa := suback(t, c, opts...)
	want := []byte{0x87, 2, 2, 2, 2, 2, 2, 2, 2}
	if string(sa.Reasons) != string(want) {
		t.Errorf("SUBACK % X, want % X", sa.Reasons, want)
	}
	for _, topic := range []string{"TopicA", "TopicA/B", "Topic/C", "TopicA/C", "/TopicA"} {
		if rc := c.Puback(topic, "x"); rc >= 0x80 {
			t.Errorf("publish %s: 0x%02X", topic, rc)
		}
	}
	for _, topic := range []string{"$TopicA/B", "$client_test5/TopicA/B"} {
		if rc := c.Puback(topic, "x"); rc >= 0x80 {
			t.Errorf("publish %s: 0x%02X", topic, rc)
		}
	}
	if rc := c.Puback("test/nosubscribe", "x"); rc != 0x87 {
		t.Errorf("publish test/nosubscribe: 0x%02X, want 0x87", rc)
	}
}
