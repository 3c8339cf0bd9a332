package gateway_test

import (
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/config"
)

// ddataPayloads returns 256 DDATA payloads of about 300 bytes, seq 0 to
// 255: a timestamp, a dozen metrics by alias, and the sequence number.
func ddataPayloads() [][]byte {
	out := make([][]byte, 256)
	for seq := range out {
		out[seq] = spDDATA(seq)
	}
	return out
}

// BenchmarkSparkplugDDATAFanIn: four edge nodes publish QoS 0 DDATA to a
// share group of four workers on one gateway, with Sparkplug awareness off
// and on: the cost of reading every Sparkplug message (topic, seq, the edge
// node's state under its lock) on the fan-in path. Reported as msg/s;
// docs/benchmarks.md has the side-by-side figures.
func BenchmarkSparkplugDDATAFanIn(b *testing.B) {
	for _, aware := range []bool{false, true} {
		b.Run(fmt.Sprint("aware=", aware), func(b *testing.B) {
			cfg := config.Default()
			cfg.NodeID = "bench"
			cfg.DataDir = b.TempDir()
			cfg.MQTT.Listen = new("127.0.0.1:0")
			cfg.HTTP.Listen = new("")
			cfg.Sparkplug.Aware = new(aware)
			g, err := gateway.Start(b.Context(), gateway.Options{Config: cfg})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			addr := g.MQTTAddr().String()
			var received atomic.Int64
			for i := range 4 {
				w, _ := brokertest.Connect(b, addr, &packet.Connect{Version: packet.V5, ClientID: []byte(fmt.Sprint("w", i)), CleanStart: true})
				w.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("$share/historian/spBv1.0/Plant/DDATA/#")}}})
				go brokertest.Drain(w.Conn, packet.V5, &received)
			}
			payloads := ddataPayloads()
			const edges = 4
			pubs := make([]*brokertest.Client, edges)
			for i := range pubs {
				pubs[i], _ = brokertest.Connect(b, addr, &packet.Connect{Version: packet.V5, ClientID: []byte(fmt.Sprint("edge", i)), CleanStart: true})
				go io.Copy(io.Discard, pubs[i].Conn)
			}
			b.SetBytes(int64(len(payloads[0])))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			done := make(chan struct{}, edges)
			for e := range edges {
				go func() {
					topic := []byte(fmt.Sprintf("spBv1.0/Plant/DDATA/edge%d/dev", e))
					var batch []byte
					for i := e; i < b.N; {
						batch = batch[:0]
						for j := 0; j < 64 && i < b.N; j++ {
							p := packet.Publish{Topic: topic, Payload: payloads[(i/edges)%256]}
							batch = p.Append(batch, packet.V5)
							i += edges
						}
						pubs[e].Conn.Write(batch)
					}
					done <- struct{}{}
				}()
			}
			for range edges {
				<-done
			}
			deadline := time.Now().Add(10 * time.Second)
			for received.Load() < int64(b.N) && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(received.Load())/float64(b.N), "delivered/op")
			b.ReportMetric(float64(received.Load())/elapsed.Seconds(), "msg/s")
		})
	}
}
