package broker_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// BenchmarkSlowReaderHeap measures what a QoS 0 subscriber that never
// reads costs the heap once its connection holds MaxPendingBytes: 40 such
// subscribers, a fan-out of 1 KB messages until each has its bound
// waiting, then the heap in use over the baseline, per reader and as a
// multiple of MaxPendingBytes (heap-x-pending). b.N is not used: one
// measurement per run.
func BenchmarkSlowReaderHeap(b *testing.B) {
	const (
		readers    = 40
		maxPending = 1 << 20
	)
	srv, addr := brokertest.RunServer(b, broker.Options{MaxPendingBytes: maxPending})
	base := robustSnapshot().heapInuse
	for i := range readers {
		c, _ := brokertest.Connect(b, addr, rawV5(fmt.Sprint("slow", i), true))
		c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("fan/t"), QoS: 0}}})
		// From here on it never reads; a small receive buffer makes the
		// broker's writes block soon rather than fill the kernel's.
		c.Conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	}
	pub, _ := brokertest.Connect(b, addr, rawV5("pub", true))
	var batch []byte
	for range 64 {
		batch = (&packet.Publish{Topic: []byte("fan/t"), Payload: bytes.Repeat([]byte{'x'}, 1<<10)}).Append(batch, packet.V5)
	}
	full := func() bool {
		n := 0
		for _, c := range srv.Clients() {
			if c.PendingBytes >= maxPending*9/10 {
				n++
			}
		}
		return n == readers
	}
	deadline := time.Now().Add(time.Minute)
	for !full() {
		if time.Now().After(deadline) {
			b.Fatalf("the readers' connections did not fill in a minute")
		}
		pub.Conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := pub.Conn.Write(batch); err != nil {
			b.Fatal(err)
		}
	}
	held := float64(robustSnapshot().heapInuse-base) / readers
	pending := 0
	for _, c := range srv.Clients() {
		pending += c.PendingBytes
	}
	b.ReportMetric(held, "heap-B/reader")
	b.ReportMetric(float64(pending)/readers, "pending-B/reader")
	b.ReportMetric(held/maxPending, "heap-x-pending")
}
