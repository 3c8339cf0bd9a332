package config

import "testing"

// A file listing its listeners opens those, not the default :1883 beside
// them; mqtt.listen given as well keeps both.
func TestListenersReplaceDefault(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"no listeners", "mqtt:\n  max_keepalive: 60s\n", DefaultMQTTListen},
		{"listeners only", "listeners:\n  - type: tcp\n    address: \"127.0.0.1:1883\"\n", ""},
		{"listeners and mqtt.listen", "mqtt:\n  listen: \":1884\"\nlisteners:\n  - type: tcp\n    address: \"127.0.0.1:1883\"\n", ":1884"},
	} {
		c, err := Parse([]byte(tc.file), "linemq.yaml")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := *c.MQTT.Listen; got != tc.want {
			t.Errorf("%s: mqtt.listen %q, want %q", tc.name, got, tc.want)
		}
	}
	// The flag asks for the default listener again.
	c, err := Parse([]byte("listeners:\n  - type: tcp\n    address: \"127.0.0.1:1883\"\n"), "linemq.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Override("mqtt.listen", ":1885", "flag -mqtt-listen"); err != nil || *c.MQTT.Listen != ":1885" {
		t.Fatalf("override: %v %q", err, *c.MQTT.Listen)
	}
}
