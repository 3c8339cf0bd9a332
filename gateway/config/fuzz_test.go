package config

import (
	"os"
	"testing"

	"github.com/linemq/linemq/broker"
)

// FuzzParse checks that no file makes Parse, Validate or BrokerOptions
// panic, and that whatever passes Validate is accepted by broker.New.
func FuzzParse(f *testing.F) {
	if example, err := os.ReadFile(example); err == nil {
		f.Add(example)
	}
	for _, s := range []string{
		"", "mqtt: 1883\n", "- a\n", "mqtt:\n  recieve_maximum: 1\n",
		"mqtt:\n  receive_maximum: 0\n  topic_alias_maximum: 0\n  listen: \"\"\n",
		"shared_subscriptions:\n  groups:\n    - name: a*\n      min_members: 3\n      max_members: 1\n",
		"a: &x {b: 1}\nc: *x\n", "mqtt:\n  max_keepalive: 1500ms\n",
		"mqtt: &m {max_queued_total: unlimited, max_pending_bytes_total: 1GiB}\nhttp: *m\n",
		"mqtt:\n  max_topic_levels: 0\n  partial_packet_timeout: unlimited\n  max_packet_size: 1KiB\n",
		"storage:\n  sync: none\n  batch_interval: 1ms\nlog_format: json\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, file)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			return
		}
		srv, err := broker.New(c.BrokerOptions())
		if err != nil {
			t.Fatalf("Validate passed but broker.New refused: %v\n%s", err, data)
		}
		srv.Close()
	})
}
