package broker_test

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// benchDrain reads and discards everything from c, acknowledging QoS 1
// messages, and counts PUBLISH packets into n.
func benchDrain(c net.Conn, v packet.Version, n *int64, mu *sync.Mutex, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 0, 64<<10)
	tmp := make([]byte, 64<<10)
	var acks []byte
	var p packet.Publish
	for {
		k, err := c.Read(tmp)
		if err != nil {
			return
		}
		buf = append(buf, tmp[:k]...)
		off := 0
		count := 0
		for {
			h, hl, err := packet.ReadFrame(buf[off:], 0)
			if err != nil || hl == 0 || len(buf)-off < hl+h.Remaining {
				break
			}
			if h.Type == packet.PUBLISH {
				count++
				if h.Flags&0x06 != 0 {
					p.Decode(v, h.Flags, buf[off+hl:off+hl+h.Remaining])
					acks = (&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(acks, v)
				}
			}
			off += hl + h.Remaining
		}
		buf = append(buf[:0], buf[off:]...)
		if len(acks) > 0 {
			c.Write(acks)
			acks = acks[:0]
		}
		mu.Lock()
		*n += int64(count)
		mu.Unlock()
	}
}

// benchFanIn measures one publisher feeding a share group of four workers
// over loopback TCP: the broker's whole path per message (read, decode,
// route, pick, encode, write), plus the cost of the clients on the same
// two cores. allocs/op counts every allocation in the process per message.
func benchFanIn(b *testing.B, qos byte) {
	_, addr := brokertest.RunServer(b, broker.Options{})
	var mu sync.Mutex
	var received int64
	for i := range 4 {
		cp := rawV5(fmt.Sprint("w", i), true)
		cp.Props.Set(packet.PropReceiveMaximum)
		cp.Props.ReceiveMaximum = 1000
		w, _ := brokertest.Connect(b, addr, cp)
		w.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("$share/g/plant/+/+/telemetry"), QoS: 1}}})
		go benchDrain(w.Conn, packet.V5, &received, &mu, make(chan struct{}))
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
				mu.Lock()
				r := received
				mu.Unlock()
				if int64(i)-r < 512 {
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		r := received
		mu.Unlock()
		if r >= int64(b.N) || time.Now().After(deadline) || (qos == 0 && time.Now().After(deadline.Add(-25*time.Second))) {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(received)/float64(b.N), "delivered/op")
}

func BenchmarkFanInQoS0(b *testing.B) { benchFanIn(b, 0) }
func BenchmarkFanInQoS1(b *testing.B) { benchFanIn(b, 1) }
