package broker_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// rssBytes returns this process's resident set size.
func rssBytes(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status:", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmRSS")
	return 0
}

// TestFloodSoak runs the abusive loads of issue 9 at once against one
// broker configured as for a 1 GB gateway (GOMEMLIMIT 256 MiB and the
// default bounds, with smaller queues), for a bounded time, while a
// well-behaved persistent QoS 1 subscriber receives every message its
// publisher had acknowledged. The memory the Go runtime holds from the OS
// (broker and the test's own clients together; the race detector's shadow
// memory, which multiplies RSS, is not part of it) must stay under 400 MiB
// throughout.
func TestFloodSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak")
	}
	const memLimit = 400 << 20
	old := debug.SetMemoryLimit(256 << 20)
	defer debug.SetMemoryLimit(old)

	srv, addr := brokertest.RunServer(t, broker.Options{
		MaxQueuedMessages: 200, PartialPacketTimeout: time.Second, MaxPendingBytes: 256 << 10,
		MaxPendingBytesTotal: 16 << 20, ReceiveMaximum: 100,
	})
	// The well-behaved pair: a persistent subscriber and a v5 publisher
	// that counts what was acknowledged.
	good, _ := brokertest.Connect(t, addr, withExpiry(rawV5("good-sub", true), 600))
	good.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("good/#"), QoS: 1}}})
	pub, _ := brokertest.Connect(t, addr, rawV5("good-pub", true))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var abusive atomic.Int64
	flood := func(name string, f func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				f(i)
				abusive.Add(1)
			}
		}()
	}
	dial := func(v packet.Version, id string) *brokertest.Client {
		c := brokertest.Dial(t, addr, v)
		c.Conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
		c.Conn.Write((&packet.Connect{Version: v, ProtocolName: []byte("MQTT"), ClientID: []byte(id), CleanStart: true, KeepAlive: 0}).Append(nil))
		return c
	}
	// Takeover storm: one client id, many connections.
	flood("takeover", func(i int) {
		c := dial(packet.V5, "storm")
		c.Read(50 * time.Millisecond)
		c.Conn.Close()
	})
	// Deep filters.
	deep := packet.Subscription{Filter: bytes.Repeat([]byte("/"), 60000)}
	flood("deep", func(i int) {
		c := dial(packet.V5, "deep-"+strconv.Itoa(i%4))
		c.Conn.Write((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{deep, deep, deep}}).Append(nil, packet.V5))
		c.Read(100 * time.Millisecond)
		c.Conn.Close()
	})
	// Partial packets that never finish.
	half := (&packet.Publish{Topic: []byte("half"), Payload: make([]byte, 200_000)}).Append(nil, packet.V5)
	flood("partial", func(i int) {
		c := dial(packet.V5, "half-"+strconv.Itoa(i%20))
		c.Conn.Write(half[:len(half)-1])
		c.Read(time.Second + 500*time.Millisecond)
		c.Conn.Close()
	})
	// Retained flood and readers of it that never read.
	payload := make([]byte, 512)
	flood("retained", func(i int) {
		c := dial(packet.V5, "retainer")
		var buf []byte
		for j := range 200 {
			buf = (&packet.Publish{Topic: fmt.Appendf(nil, "ret/%d", (i*200+j)%20000), Retain: true, Payload: payload}).Append(buf, packet.V5)
		}
		c.Conn.Write(buf)
		c.Conn.Close()
		r := dial(packet.V311, "stuck-reader-"+strconv.Itoa(i%10))
		r.Conn.Write((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("ret/#"), QoS: 1}}}).Append(nil, packet.V311))
		time.Sleep(20 * time.Millisecond) // pacing the loop, not waiting on a result
		r.Conn.Close()
	})
	// A stuck share group behind a 3.1.1 flooder.
	windowSub(t, addr, "stuck-member", "$share/g/grp/#", 1, 0)
	flood("group", func(i int) {
		c := dial(packet.V311, "grp-flooder")
		var buf []byte
		for j := range 500 {
			buf = (&packet.Publish{Topic: []byte("grp/x"), QoS: 1, PacketID: uint16(j + 1), Payload: payload}).Append(buf, packet.V311)
		}
		c.Conn.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		c.Conn.Write(buf)
		c.Conn.Close()
	})

	// The good pair runs throughout; the RSS is sampled as it goes.
	var peak, peakRSS uint64
	acked := 0
	deadline := time.Now().Add(20 * time.Second)
	for i := 1; time.Now().Before(deadline); i++ {
		if rc := pubAck(t, pub, uint16(i%60000+1), "good/t", strconv.Itoa(i)); rc != packet.Success {
			t.Fatalf("good publish %d: %v", i, rc)
		}
		acked = i
		var p packet.Publish
		good.Expect(packet.PUBLISH, &p)
		if string(p.Payload) != strconv.Itoa(i) {
			t.Fatalf("good subscriber got %q, want %d", p.Payload, i)
		}
		good.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
		if i%50 == 0 {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.Sys-ms.HeapReleased)
			peakRSS = max(peakRSS, rssBytes(t))
			if peak > memLimit {
				f, _ := os.Create(os.TempDir() + "/flood.heap")
				pprof.WriteHeapProfile(f)
				f.Close()
				t.Fatalf("the runtime holds %d MiB from the OS, over the %d MiB bound (heap in use %d MiB, stacks %d MiB, goroutines %d)",
					peak>>20, memLimit>>20, ms.HeapInuse>>20, ms.StackInuse>>20, runtime.NumGoroutine())
			}
		}
	}
	close(stop)
	wg.Wait()
	st := srv.Stats()
	t.Logf("20 s: %d acknowledged messages delivered in order to the good subscriber, %d abusive rounds, peak memory %d MiB (RSS %d MiB with the race detector's shadow if on); stats: connects %d, refused %d, QoS0 dropped %d, pending %d B",
		acked, abusive.Load(), peak>>20, peakRSS>>20, st.Connects, st.RefusedQueueFull, st.DroppedQoS0, st.PendingBytes)
}
