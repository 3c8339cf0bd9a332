package broker_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/internal/mqtttest"
)

// soakWorker is a share-group member that records every sequence number it
// receives, then acknowledges it, until its connection is killed.
type soakWorker struct {
	c    *brokertest.Client
	done chan struct{}
}

func startSoakWorker(t *testing.T, addr, id string, seen *sync.Map, dups *atomic.Int64) *soakWorker {
	cp := rawV5(id, true)
	cp.Props.Set(packet.PropReceiveMaximum)
	cp.Props.ReceiveMaximum = 32
	c, _ := brokertest.Connect(t, addr, cp)
	// The SUBACK is not awaited here: the group may hand the new member a
	// message before it (the spec allows it), and the loop below must
	// record that one too. It skips the SUBACK.
	c.Send((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("$share/soak/plant/+/+/telemetry"), QoS: 1}}}).Append(nil, packet.V5))
	w := &soakWorker{c: c, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			h, body, err := c.Read(30 * time.Second)
			if err != nil {
				return
			}
			if h.Type != packet.PUBLISH {
				continue
			}
			var p packet.Publish
			if err := p.Decode(packet.V5, h.Flags, body); err != nil {
				return
			}
			seq := binary.BigEndian.Uint64(p.Payload)
			if _, loaded := seen.LoadOrStore(seq, true); loaded {
				dups.Add(1)
			}
			a := packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}
			c.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Conn.Write(a.Append(nil, packet.V5)); err != nil {
				return
			}
		}
	}()
	return w
}

// TestShareSoakWorkerChurn runs 8 QoS 1 publishers into a group of 4
// workers, killing one worker's connection and starting a replacement every
// quarter second, and checks that every acknowledged sequence number reached a
// worker at least once.
func TestShareSoakWorkerChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test skipped in -short mode")
	}
	srv, addr := brokertest.RunServer(t, broker.Options{})
	var seen sync.Map
	var dups atomic.Int64
	workers := make([]*soakWorker, 4)
	for i := range workers {
		workers[i] = startSoakWorker(t, addr, fmt.Sprint("worker-", i), &seen, &dups)
	}
	waitMembers(t, srv, "soak", 4)

	// Each publisher sends at least perPublisher messages, and goes on
	// until the workers have churned enough: a fast machine must not end
	// the run before the kills that are its point.
	const publishers, perPublisher, minKills = 8, 3000, 4
	var kills atomic.Int64
	acked := make([][]uint64, publishers) // per publisher, the numbers acknowledged
	var wg sync.WaitGroup
	pubErr := make(chan error, publishers)
	for p := range publishers {
		pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: fmt.Sprint("pub-", p), CleanStart: true}, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := make([]byte, 64)
			for i := 0; i < perPublisher || kills.Load() < minKills; i++ {
				n := uint64(p)<<32 | uint64(i)
				binary.BigEndian.PutUint64(payload, n)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := pub.Publish(ctx, &paho.Publish{Topic: fmt.Sprintf("plant/line%d/dev%d/telemetry", p%3, i%7), QoS: 1, Payload: payload})
				cancel()
				if err != nil {
					pubErr <- fmt.Errorf("publisher %d message %d: %w", p, i, err)
					return
				}
				acked[p] = append(acked[p], n)
				if i%50 == 0 {
					time.Sleep(5 * time.Millisecond) // keep the run long enough to churn
				}
			}
		}()
	}
	stop := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for n := 4; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			victim := n % len(workers)
			workers[victim].c.Conn.Close() // a crash: no DISCONNECT
			<-workers[victim].done
			workers[victim] = startSoakWorker(t, addr, fmt.Sprint("worker-", n), &seen, &dups)
			kills.Add(1)
		}
	}()
	wg.Wait()
	close(stop)
	<-churned
	close(pubErr)
	for err := range pubErr {
		t.Fatal(err)
	}
	all := slices.Concat(acked...)
	total := len(all)
	brokertest.Eventually(t, 20*time.Second, "every acknowledged message delivered", func() bool {
		n := 0
		seen.Range(func(any, any) bool { n++; return true })
		return n >= total
	})
	var lost []uint64
	for _, n := range all {
		if _, ok := seen.Load(n); !ok {
			lost = append(lost, n)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d messages lost, e.g. (publisher<<32 | number) %v", len(lost), total, lost[:min(10, len(lost))])
	}
	gs := srv.ShareGroups()
	t.Logf("%d messages, %d worker kills, %d duplicates, redispatched %d, dropped %d",
		total, kills.Load(), dups.Load(), gs[0].Redispatched, gs[0].Dropped)
}
