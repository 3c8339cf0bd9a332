package main

import (
	binenc "encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// crashTracker records, per subscriber, the sequence numbers received.
type crashTracker struct {
	mu    sync.Mutex
	seen  map[uint64]int
	plain map[uint64]int // copies received without DUP, when tracked (addCopy)
	order []uint64       // the copies received without DUP, in arrival order (addCopy)
}

func (c *crashTracker) add(seq uint64) {
	c.mu.Lock()
	c.seen[seq]++
	c.mu.Unlock()
}

// addCopy records a copy of seq and whether it carried DUP.
func (c *crashTracker) addCopy(seq uint64, dup bool) {
	c.mu.Lock()
	c.seen[seq]++
	if !dup {
		if c.plain == nil {
			c.plain = map[uint64]int{}
		}
		c.plain[seq]++
		c.order = append(c.order, seq)
	}
	c.mu.Unlock()
}

// plainDuplicates counts the messages below limit received more than once
// without DUP: of the copies of one message, all but the first must say
// DUP.
func (c *crashTracker) plainDuplicates(limit uint64) (n int, which []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for seq, k := range c.plain {
		if k > 1 && seq < limit {
			n++
			which = append(which, seq)
		}
	}
	slices.Sort(which)
	return n, which
}

// has reports whether seq has been received at least once.
func (c *crashTracker) has(seq uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[seq] > 0
}

func (c *crashTracker) missing(acked []uint64) (missing int, dups int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range acked {
		if c.seen[s] == 0 {
			missing++
		}
	}
	for _, n := range c.seen {
		if n > 1 {
			dups += n - 1
		}
	}
	return missing, dups
}

// dialMQTT connects id to addr as a v5 client with a session expiry of an
// hour, for a process that may die at any moment: unlike brokertest.Connect
// it reports failures instead of failing the test, so the caller can
// reconnect. It returns the CONNACK's session present flag.
func dialMQTT(addr, id string, clean bool) (*brokertest.Client, bool, error) {
	cp := &packet.Connect{ClientID: []byte(id), CleanStart: clean}
	cp.Props.Set(packet.PropSessionExpiry)
	cp.Props.SessionExpiry = 3600
	return dialConnect(addr, cp)
}

// dialConnect sends cp (as MQTT 5) to addr and returns the connection once
// its CONNACK accepted it, with Session Present; any other outcome is an
// error and the connection is closed.
func dialConnect(addr string, cp *packet.Connect) (*brokertest.Client, bool, error) {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, false, err
	}
	// A Client without a test: its Read and Write never fail the test.
	c := &brokertest.Client{Conn: nc, Version: packet.V5}
	cp.ProtocolName, cp.Version = []byte("MQTT"), packet.V5
	if err := c.Write(cp.Append(nil)); err != nil {
		nc.Close()
		return nil, false, err
	}
	h, body, err := c.Read(5 * time.Second)
	if err != nil || h.Type != packet.CONNACK {
		nc.Close()
		return nil, false, fmt.Errorf("no CONNACK: %v", err)
	}
	var ca packet.Connack
	if err := ca.Decode(packet.V5, body); err != nil || ca.Reason != packet.Success {
		nc.Close()
		return nil, false, fmt.Errorf("CONNACK %v %v", ca.Reason, err)
	}
	return c, ca.SessionPresent, nil
}

// TestCrashRecovery is the persistence acceptance test: a real linemq
// process is killed with SIGKILL several times while QoS 1 publishers send
// to persistent-session subscribers (one of them offline the whole time),
// and restarted on the same data directory. In sync modes always and batch,
// every message whose PUBACK reached its publisher must reach every
// subscriber at least once; the retained message and the subscriptions
// must survive.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	for _, mode := range []string{"always", "batch"} {
		t.Run(mode, func(t *testing.T) { crashRecovery(t, mode) })
	}
}

func crashRecovery(t *testing.T, mode string) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "linemq.yaml")
	writeFile(t, cfg, fmt.Sprintf("storage:\n  sync: %s\nmqtt:\n  max_queued_messages: 100000\n", mode))
	// One port for every restart, chosen by the OS, so that clients find
	// the broker again.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	args := []string{"-config", cfg, "-mqtt-listen", addr, "-http-listen", "", "-data-dir", filepath.Join(dir, "data")}
	var d *daemon
	startBroker := func() {
		d = start(t, args...)
		d.waitLine(t, listening, 10*time.Second)
	}
	startBroker()

	// Set up: a retained message and three persistent subscribers; "away"
	// subscribes and leaves, to come back only at the end.
	c, _, err := dialMQTT(addr, "setup", true)
	if err != nil {
		t.Fatal(err)
	}
	ret := packet.Publish{Topic: []byte("crash/config"), QoS: 1, PacketID: 1, Retain: true, Payload: []byte("retained-v1")}
	c.Write(ret.Append(nil, packet.V5))
	if h, _, err := c.Read(5 * time.Second); err != nil || h.Type != packet.PUBACK {
		t.Fatalf("retained publish: %v %v", h.Type, err)
	}
	c.Conn.Close()
	subscribe := func(id string) {
		c, _, err := dialMQTT(addr, id, true)
		if err != nil {
			t.Fatal(err)
		}
		s := packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("crash/data/#"), QoS: 1}}}
		c.Write(s.Append(nil, packet.V5))
		if h, _, err := c.Read(5 * time.Second); err != nil || h.Type != packet.SUBACK {
			t.Fatalf("subscribe %s: %v %v", id, h.Type, err)
		}
		c.Conn.Close()
	}
	names := []string{"online-1", "online-2", "away"}
	trackers := map[string]*crashTracker{}
	for _, n := range names {
		subscribe(n)
		trackers[n] = &crashTracker{seen: map[uint64]int{}}
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	receive := func(id string) {
		defer wg.Done()
		tr := trackers[id]
		readSession(addr, id, &stop, func(p *packet.Publish) { tr.addCopy(binenc.BigEndian.Uint64(p.Payload), p.Dup) })
	}
	for _, n := range names[:2] {
		wg.Add(1)
		go receive(n)
	}

	var ackedMu sync.Mutex
	var acked []uint64
	var pubWG sync.WaitGroup
	publish := func(p int) {
		defer pubWG.Done()
		publishSeq(addr, fmt.Sprint("pub-", p), fmt.Sprintf("crash/data/%d", p), uint64(p)<<32, &stop,
			func(seq uint64) []byte { return binenc.BigEndian.AppendUint64(nil, seq) },
			func(seq uint64) {
				ackedMu.Lock()
				acked = append(acked, seq)
				ackedMu.Unlock()
			})
	}
	for p := range 2 {
		pubWG.Add(1)
		go publish(p)
	}

	const kills = 3
	ackedAt := func() int { ackedMu.Lock(); defer ackedMu.Unlock(); return len(acked) }
	for range kills {
		// Let some traffic through, then pull the plug mid-stream.
		target := ackedAt() + 300
		waitFor(20*time.Second, func() bool { return ackedAt() >= target })
		d.cmd.Process.Signal(syscall.SIGKILL)
		<-d.exited
		startBroker()
	}
	target := ackedAt() + 300
	waitFor(20*time.Second, func() bool { return ackedAt() >= target })
	stop.Store(true)
	pubWG.Wait()
	wg.Wait()
	stop.Store(false)

	// Everyone comes back, the offline one for the first time since it
	// subscribed: without subscribing again.
	for _, n := range names {
		wg.Add(1)
		go receive(n)
	}
	ackedMu.Lock()
	all := append([]uint64(nil), acked...)
	ackedMu.Unlock()
	if len(all) < 4*300 {
		t.Fatalf("only %d messages acknowledged: the test did not exercise the broker", len(all))
	}
	arrived := func() bool {
		for _, n := range names {
			if m, _ := trackers[n].missing(all); m > 0 {
				return false
			}
		}
		return true
	}
	if !waitFor(30*time.Second, arrived) {
		for _, n := range names {
			m, _ := trackers[n].missing(all)
			t.Errorf("%s: %d of %d acknowledged messages never arrived", n, m, len(all))
		}
	}
	stop.Store(true)
	wg.Wait()
	for _, n := range names {
		_, dups := trackers[n].missing(all)
		t.Logf("%s mode, %s: %d acknowledged messages, %d kills, %d duplicates", mode, n, len(all), kills, dups)
		// A crash can only repeat what was in flight or not yet recorded as
		// acknowledged when it hit: a few dozen messages per kill at most.
		if dups > kills*100 {
			t.Errorf("%s: %d duplicates for %d kills, more than a crash can explain", n, dups, kills)
		}
		// Every second copy says DUP: a message queued for a client
		// connected when the process died may have gone out before the
		// record of its sending was committed.
		if k, which := trackers[n].plainDuplicates(^uint64(0)); k > 0 {
			t.Errorf("%s: %d messages arrived twice without DUP (first: %v)", n, k, which[:min(k, 10)])
		}
	}

	// The retained message survived every crash.
	c, _, err = dialMQTT(addr, "late", true)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Conn.Close()
	s := packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("crash/config"), QoS: 1}}}
	c.Write(s.Append(nil, packet.V5))
	for {
		h, body, err := c.Read(5 * time.Second)
		if err != nil {
			t.Fatalf("no retained message after the crashes: %v", err)
		}
		if h.Type == packet.PUBLISH {
			var p packet.Publish
			p.Decode(packet.V5, h.Flags, body)
			if string(p.Payload) != "retained-v1" || !p.Retain {
				t.Fatalf("retained message %q retain=%v", p.Payload, p.Retain)
			}
			break
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.exitCode(t, 10*time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "linemq.db")); err != nil {
		t.Fatal(err)
	}
}

func errAs(err error, target any) bool { return errors.As(err, target) }

// publishSeq publishes numbered QoS 1 messages to topic as id (clean
// session), one at a time from first on, until stop is set, connecting
// again whenever the broker goes away; acked sees each number whose PUBACK
// accepted it. A number whose PUBACK was lost is not sent again: it may
// arrive or not, never out of order.
func publishSeq(addr, id, topic string, first uint64, stop *atomic.Bool, payload func(uint64) []byte, acked func(uint64)) {
	seq := first
	for !stop.Load() {
		c, _, err := dialMQTT(addr, id, true)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for !stop.Load() {
			m := packet.Publish{Topic: []byte(topic), QoS: 1, PacketID: uint16(seq%60000) + 1, Payload: payload(seq)}
			err := c.Write(m.Append(nil, packet.V5))
			var h packet.FixedHeader
			var body []byte
			if err == nil {
				h, body, err = c.Read(5 * time.Second)
			}
			var a packet.Ack
			if err == nil && h.Type == packet.PUBACK && a.Decode(packet.V5, h.Type, body) == nil && !a.Reason.IsError() {
				acked(seq)
			}
			seq++ // never again, acknowledged or not: a second publish would be a second message
			if err != nil {
				break
			}
		}
		c.Conn.Close()
	}
}

// readSession reads id's persistent session at addr until stop is set,
// connecting again whenever the broker goes away (it is killed and
// restarted under the reader); handle sees each PUBLISH before its
// PUBACK.
func readSession(addr, id string, stop *atomic.Bool, handle func(*packet.Publish)) {
	for !stop.Load() {
		c, _, err := dialMQTT(addr, id, false)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for {
			h, body, err := c.Read(200 * time.Millisecond)
			if err != nil {
				var ne net.Error
				if errAs(err, &ne) && ne.Timeout() && !stop.Load() {
					continue
				}
				break
			}
			if h.Type != packet.PUBLISH {
				continue
			}
			var p packet.Publish
			if p.Decode(packet.V5, h.Flags, body) != nil {
				break
			}
			handle(&p)
			if c.Write((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5)) != nil {
				break
			}
		}
		c.Conn.Close()
	}
}
