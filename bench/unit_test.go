package bench

import (
	"bytes"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

func TestHistogramBuckets(t *testing.T) {
	prev := -1
	for v := uint64(0); v < 1<<20; v++ {
		b := histBucket(v)
		if b < prev || b > prev+1 {
			t.Fatalf("bucket(%d) = %d after %d: buckets must be contiguous", v, b, prev)
		}
		prev = b
		got := histValue(b)
		if v < histSub && got != v {
			t.Fatalf("value %d reported as %d, want exact below %d", v, got, histSub)
		}
		if diff := float64(got) - float64(v); diff < -float64(v)/64 || diff > float64(v)/64 {
			t.Fatalf("value %d reported as %d: off by more than 1/64", v, got)
		}
	}
	if b := histBucket(1 << 40); b != histBuckets-1 {
		t.Errorf("a huge value lands in bucket %d, want the last (%d)", b, histBuckets-1)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h, a, b histogram
	for v := uint64(1); v <= 10000; v++ {
		h.record(v)
		if v%2 == 0 {
			a.record(v)
		} else {
			b.record(v)
		}
	}
	a.merge(&b)
	for _, hh := range []*histogram{&h, &a} {
		for _, c := range []struct {
			q    float64
			want uint64
		}{{0.5, 5000}, {0.99, 9900}, {0.999, 9990}, {1, 10000}} {
			got := hh.quantile(c.q)
			if d := float64(got) - float64(c.want); d < -float64(c.want)/64 || d > float64(c.want)/64 {
				t.Errorf("quantile(%v) = %d, want %d within 1/64", c.q, got, c.want)
			}
		}
		if hh.n != 10000 || hh.max != 10000 {
			t.Errorf("n %d max %d", hh.n, hh.max)
		}
	}
	var empty histogram
	if empty.quantile(0.5) != 0 {
		t.Error("empty histogram quantile not 0")
	}
}

func TestPayload(t *testing.T) {
	const tag = 0xC0FFEE
	p := newPayload(300, tag)
	putPayload(p, 3<<seqShift|12345, 987654321)
	pub, n, sent, ok := parsePayload(p, tag, 4)
	if !ok || pub != 3 || n != 12345 || sent != 987654321 {
		t.Errorf("parsed %d %d %d %v", pub, n, sent, ok)
	}
	if _, _, _, ok := parsePayload(p, tag+1, 4); ok {
		t.Error("a payload with another run's tag was accepted")
	}
	if _, _, _, ok := parsePayload(p, tag, 3); ok {
		t.Error("a publisher index out of range was accepted")
	}
	if _, _, _, ok := parsePayload(p[:15], tag, 4); ok {
		t.Error("a short payload was accepted")
	}
	// 16 bytes: no room for the tag, still this run's.
	small := newPayload(16, tag)
	putPayload(small, 1, 2)
	if _, _, _, ok := parsePayload(small, tag, 4); !ok {
		t.Error("a minimum-size payload was refused")
	}
}

func TestSeenSet(t *testing.T) {
	s := newSeenSet(2)
	if !s.add(1, 5) || s.add(1, 5) || !s.add(0, 5) || !s.add(1, seenChunkBits+7) || s.add(1, seenChunkBits+7) {
		t.Error("add does not tell new from seen")
	}
	// Concurrent adds of the same messages: each is new exactly once.
	s = newSeenSet(1)
	const n = 3 * seenChunkBits / 2
	var fresh [4]int
	var wg sync.WaitGroup
	for w := range fresh {
		wg.Go(func() {
			for i := uint64(0); i < n; i++ {
				if s.add(0, i) {
					fresh[w]++
				}
			}
		})
	}
	wg.Wait()
	if total := fresh[0] + fresh[1] + fresh[2] + fresh[3]; total != n {
		t.Errorf("%d messages new across 4 receivers, want %d", total, n)
	}
}

func TestFrameReader(t *testing.T) {
	// Packets split at every byte (OneByteReader), and one larger than the
	// initial buffer.
	var stream []byte
	big := bytes.Repeat([]byte{7}, 1000)
	pubs := []packet.Publish{
		{QoS: 1, PacketID: 1, Topic: []byte("a/b"), Payload: []byte("x")},
		{Topic: []byte("c"), Payload: big},
		{QoS: 2, PacketID: 9, Topic: []byte("d"), Payload: nil},
	}
	for i := range pubs {
		stream = pubs[i].Append(stream, packet.V5)
	}
	stream = packet.AppendPingresp(stream)
	fr := newFrameReader(iotest.OneByteReader(bytes.NewReader(stream)), 64, &clock{base: time.Now()})
	for i := range pubs {
		h, body, err := fr.next()
		if err != nil || h.Type != packet.PUBLISH {
			t.Fatalf("packet %d: %v %v", i, h.Type, err)
		}
		var got packet.Publish
		if err := got.Decode(packet.V5, h.Flags, body); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Topic, pubs[i].Topic) || !bytes.Equal(got.Payload, pubs[i].Payload) || got.PacketID != pubs[i].PacketID {
			t.Errorf("packet %d decoded as %+v", i, got)
		}
	}
	if h, _, err := fr.next(); err != nil || h.Type != packet.PINGRESP {
		t.Errorf("last packet %v %v", h.Type, err)
	}
	if _, _, err := fr.next(); err == nil {
		t.Error("no error at the end of the stream")
	}
}

func TestReadProc(t *testing.T) {
	s, err := readProc(os.Getpid())
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if s.rssKiB <= 0 || s.hwmKiB < s.rssKiB || s.cpu < 0 {
		t.Errorf("sample %+v", s)
	}
	if _, err := readProc(1 << 30); err == nil {
		t.Error("a pid that cannot exist was read")
	}
}

// TestNoAllocsPerMessage gates the hot paths: encoding a batch of PUBLISH
// packets, and handling a delivery (decode, record, acknowledge).
func TestNoAllocsPerMessage(t *testing.T) {
	clk := &clock{base: time.Now()}
	for _, v := range []packet.Version{packet.V5, packet.V311} {
		for _, qos := range []byte{0, 1, 2} {
			c := &client{v: v, id: "t", clock: clk}
			p := &publisher{c: c, idx: 1, topic: []byte("plant/line1/dev1/telemetry"), qos: qos, tag: 7, size: 300, interval: 1000, window: 64}
			pk := packet.Publish{QoS: qos, Topic: p.topic, Payload: newPayload(300, 7)}
			buf := make([]byte, 0, 64*400)
			n := uint64(0)
			allocs := testing.AllocsPerRun(100, func() {
				buf = p.encode(buf[:0], &pk, n, 32, 0, 0)
				n += 32
				for i := range 32 {
					p.release(uint16((n-32+uint64(i))%65535 + 1)) // acknowledge, so identifiers recycle
				}
			})
			if allocs != 0 {
				t.Errorf("v%d QoS %d: encoding 32 PUBLISH packets allocates %v times", v, qos, allocs)
			}

			rc := newReceiver(c, newSeenSet(2), 7, 2, true)
			var frames []byte
			for i := range 64 {
				putPayload(pk.Payload, 1<<seqShift|uint64(i), 0)
				pk.PacketID = uint16(i + 1)
				frames = pk.Append(frames, v)
			}
			fr := newFrameReader(bytes.NewReader(nil), 1<<16, clk)
			i := 0
			allocs = testing.AllocsPerRun(1000, func() {
				fr.buf, fr.r, fr.w = frames, 0, len(frames)
				for range i % 64 {
					fr.next()
				}
				h, body, _ := fr.next()
				if err := rc.handle(h, body, 0); err != nil {
					t.Fatal(err)
				}
				rc.acks = rc.acks[:0]
				i++
			})
			if allocs != 0 {
				t.Errorf("v%d QoS %d: handling a delivery allocates %v times", v, qos, allocs)
			}
		}
	}
}

func TestAllocIDSkipsInFlight(t *testing.T) {
	p := &publisher{}
	held := map[uint16]bool{}
	for range 100 {
		id := p.allocID()
		if id == 0 || held[id] {
			t.Fatalf("identifier %d handed out twice or zero", id)
		}
		held[id] = true
	}
	// Free all but a random few, then go round the whole space: the held
	// ones must be skipped.
	keep := map[uint16]bool{}
	for id := range held {
		if rand.IntN(10) == 0 {
			keep[id] = true
		} else if !p.release(id) {
			t.Fatalf("release(%d) = false for an identifier in flight", id)
		}
	}
	for range 65535 - len(keep) {
		id := p.allocID()
		if keep[id] {
			t.Fatalf("identifier %d still in flight was handed out", id)
		}
		p.release(id)
	}
	if p.release(0xFFFF) && !keep[0xFFFF] {
		t.Error("release of an identifier not in flight reported true")
	}
}

func TestPeerClosed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dial := func() (client, server net.Conn) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); s.Close() })
		return c, s
	}

	c, s := dial()
	if peerClosed(c) {
		t.Error("an open, silent connection reported closed")
	}
	// PINGRESPs are what an idle connection may be sent: still open.
	s.Write(packet.AppendPingresp(nil))
	s.Write(packet.AppendPingresp(nil))
	time.Sleep(10 * time.Millisecond) // let them arrive; either way the answer is "open"
	if peerClosed(c) {
		t.Error("a connection sent PINGRESP reported closed")
	}
	s.Close()
	brokertest.Eventually(t, time.Second, "the close to be seen", func() bool { return peerClosed(c) })

	c, s = dial()
	s.Write((&packet.Disconnect{Reason: packet.ServerBusy}).Append(nil, packet.V5))
	brokertest.Eventually(t, time.Second, "the DISCONNECT to be seen", func() bool { return peerClosed(c) })
}
