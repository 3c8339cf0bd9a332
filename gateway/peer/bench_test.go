package peer

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/internal/certtest"
)

// benchHandler accepts every delivery at once and releases one slot of
// the sender's window per forward.
type benchHandler struct{ window chan struct{} }

func (h *benchHandler) Forward(string, *broker.Message) { <-h.window }

func (h *benchHandler) Deliver(_ string, _ Target, _ *broker.Message, r Reply) { r.Done(true, nil) }

// benchPair starts a and b over loopback gRPC, both in this process (so
// allocations and CPU are both nodes' together), with mutual TLS if tls.
func benchPair(b *testing.B, h *benchHandler, tls ...bool) (a, _ *node) {
	var oa, ob Options
	if len(tls) > 0 && tls[0] {
		ca := certtest.NewCA(b, "bench-ca")
		oa.TLS, ob.TLS = ca.Issue(b, "a"), ca.Issue(b, "b")
	}
	oa.Handler, ob.Handler = h, h
	a = startNode(b, "a", oa)
	peer := startNode(b, "b", ob)
	connect(a, peer)
	waitAvailable(b, a, "b", true)
	return a, peer
}

// One directed delivery at a time: the round trip a held PUBACK waits for.
func BenchmarkDeliverRoundTrip(b *testing.B) {
	a, _ := benchPair(b, &benchHandler{})
	m := broker.NewMessage("line/3/temp", bytes.Repeat([]byte("x"), 64), 1, false)
	to := Target{Group: "workers", Filter: "line/+/temp", Client: "plc-7"}
	ch := make(chan error, 1)
	done := func(err error) { ch <- err }
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := a.Deliver(context.Background(), "b", to, m, done); err != nil {
			b.Fatal(err)
		}
		if err := <-ch; err != nil {
			b.Fatal(err)
		}
	}
}

// Directed deliveries with up to 256 awaiting their answer: the rate a
// publish path spreading over a remote node's members can reach.
func BenchmarkDeliverWindow(b *testing.B) {
	a, _ := benchPair(b, &benchHandler{})
	m := broker.NewMessage("line/3/temp", bytes.Repeat([]byte("x"), 64), 1, false)
	to := Target{Group: "workers", Filter: "line/+/temp", Client: "plc-7"}
	window := make(chan struct{}, 256)
	done := func(err error) {
		if err != nil {
			b.Error(err)
		}
		<-window
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		window <- struct{}{}
		if err := a.Deliver(context.Background(), "b", to, m, done); err != nil {
			b.Fatal(err)
		}
	}
	for range cap(window) {
		window <- struct{}{}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
}

// Ordinary forwards, as many as the queue holds in flight.
func BenchmarkForward(b *testing.B) {
	for _, bc := range []struct {
		size int
		tls  bool
	}{{64, false}, {1024, false}, {1024, true}} {
		name := fmt.Sprintf("%dB", bc.size)
		if bc.tls {
			name += "-mTLS"
		}
		size := bc.size
		b.Run(name, func(b *testing.B) {
			h := &benchHandler{window: make(chan struct{}, DefaultMaxQueued/2)}
			a, _ := benchPair(b, h, bc.tls)
			m := broker.NewMessage("line/3/temp", bytes.Repeat([]byte("x"), size), 0, false)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				h.window <- struct{}{}
				if err := a.Send("b", m); err != nil {
					b.Fatal(err)
				}
			}
			for range cap(h.window) {
				h.window <- struct{}{}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
			s := stats(b, a, "b")
			b.ReportMetric(float64(s.SentRecords)/float64(s.SentFrames), "records/frame")
		})
	}
}
