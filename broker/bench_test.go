package broker_test

import (
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// benchFanIn measures one publisher feeding a share group of four workers
// over loopback TCP: the broker's whole path per message (read, decode,
// route, pick, encode, write), plus the cost of the clients on the same
// two cores. allocs/op counts every allocation in the process per message.
func benchFanIn(b *testing.B, qos byte) {
	_, addr := brokertest.RunServer(b, broker.Options{})
	var received atomic.Int64
	for i := range 4 {
		cp := rawV5(fmt.Sprint("w", i), true)
		cp.Props.Set(packet.PropReceiveMaximum)
		cp.Props.ReceiveMaximum = 1000
		w, _ := brokertest.Connect(b, addr, cp)
		w.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("$share/g/plant/+/+/telemetry"), QoS: 1}}})
		go brokertest.Drain(w.Conn, packet.V5, &received)
	}
	pub, _ := brokertest.Connect(b, addr, rawV5("pub", true))
	go io.Copy(io.Discard, pub.Conn) // PUBACKs
	payload := make([]byte, 300)
	var batch []byte
	const perWrite = 64
	pid := uint16(0)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		batch = batch[:0]
		for j := 0; j < perWrite && i < b.N; j++ {
			p := packet.Publish{Topic: []byte("plant/line1/dev7/telemetry"), QoS: qos, Payload: payload}
			if qos > 0 {
				pid++
				if pid == 0 {
					pid = 1
				}
				p.PacketID = pid
			}
			batch = p.Append(batch, packet.V5)
			i++
		}
		pub.Conn.Write(batch)
		if qos > 0 {
			// Stay within the broker's Receive Maximum (1024).
			for {
				if int64(i)-received.Load() < 512 {
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := received.Load()
		if r >= int64(b.N) || time.Now().After(deadline) || (qos == 0 && time.Now().After(deadline.Add(-25*time.Second))) {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(received.Load())/float64(b.N), "delivered/op")
}

func BenchmarkFanInQoS0(b *testing.B) { benchFanIn(b, 0) }
func BenchmarkFanInQoS1(b *testing.B) { benchFanIn(b, 1) }
