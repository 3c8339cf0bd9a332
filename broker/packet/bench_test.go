package packet_test

import (
	"testing"

	"github.com/linemq/linemq/broker/packet"
)

// Benchmarks for the per-packet hot path. Run with:
//
//	go test -run='^$' -bench=. -benchmem ./broker/packet/

func benchPublishCases() []struct {
	name string
	v    packet.Version
	p    *packet.Publish
} {
	return []struct {
		name string
		v    packet.Version
		p    *packet.Publish
	}{
		{"qos0-v311-300B", packet.V311, publishQoS0()},
		{"qos1-v5-props-300B", packet.V5, publishWithProps()},
	}
}

func BenchmarkDecodePublish(b *testing.B) {
	for _, tc := range benchPublishCases() {
		b.Run(tc.name, func(b *testing.B) {
			h, body := frame(b, tc.p.Append(nil, tc.v))
			var p packet.Publish
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Decode(tc.v, h.Flags, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncodePublish(b *testing.B) {
	for _, tc := range benchPublishCases() {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, 0, 1024)
			b.SetBytes(int64(tc.p.Size(tc.v)))
			b.ReportAllocs()
			for b.Loop() {
				buf = tc.p.Append(buf[:0], tc.v)
			}
		})
	}
}

func BenchmarkAppendHeader(b *testing.B) {
	for _, tc := range benchPublishCases() {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, 0, 1024)
			b.ReportAllocs()
			for b.Loop() {
				buf = tc.p.AppendHeader(buf[:0], tc.v)
			}
		})
	}
}

func BenchmarkReadFrame(b *testing.B) {
	for _, tc := range benchPublishCases() {
		b.Run(tc.name, func(b *testing.B) {
			wire := tc.p.Append(nil, tc.v)
			b.ReportAllocs()
			for b.Loop() {
				if _, n, err := packet.ReadFrame(wire, 1<<20); n == 0 || err != nil {
					b.Fatal(n, err)
				}
			}
		})
	}
}

func BenchmarkDecodeConnect(b *testing.B) {
	for _, tc := range []struct {
		name string
		c    *packet.Connect
	}{
		{"v311-user-pass", &packet.Connect{Version: packet.V311, CleanStart: true, KeepAlive: 60, ClientID: bs("sensor-0042"),
			UsernameFlag: true, Username: bs("device"), PasswordFlag: true, Password: bs("s3cret")}},
		{"v5-will-props", roundTripV5[0].(*packet.Connect)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			_, body := frame(b, tc.c.Append(nil))
			var c packet.Connect
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeSubscribe(b *testing.B) {
	s := &packet.Subscribe{PacketID: 3, Props: present(packet.Properties{SubscriptionIDs: []uint32{5}}),
		Subs: []packet.Subscription{
			{Filter: bs("home/+/temperature"), QoS: 1},
			{Filter: bs("home/kitchen/#"), QoS: 2, NoLocal: true},
			{Filter: bs("$share/workers/jobs/+"), QoS: 1, RetainHandling: 2},
		}}
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		name := "v311-3-filters"
		if v == packet.V5 {
			name = "v5-3-filters"
		}
		b.Run(name, func(b *testing.B) {
			_, body := frame(b, s.Append(nil, v))
			var d packet.Subscribe
			b.ReportAllocs()
			for b.Loop() {
				if err := d.Decode(v, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
