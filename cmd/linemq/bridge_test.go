package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// bridgeTracker records what arrived at the remote, per topic, in order.
type bridgeTracker struct {
	mu  sync.Mutex
	got map[string][]uint64
	n   int
}

func (b *bridgeTracker) add(topic string, seq uint64) {
	b.mu.Lock()
	b.got[topic] = append(b.got[topic], seq)
	b.n++
	b.mu.Unlock()
}

func (b *bridgeTracker) count() int { b.mu.Lock(); defer b.mu.Unlock(); return b.n }

// check returns, per topic, the acknowledged sequence numbers that have not
// arrived, the duplicates, and the numbers that arrived after a later one
// had (out of publish order).
func (b *bridgeTracker) check(acked map[string][]uint64) (missing, dups int, disorder []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for topic, seqs := range acked {
		seen := make(map[uint64]bool)
		var high uint64
		for _, s := range b.got[topic] {
			switch {
			case seen[s]:
				dups++
			case s < high:
				disorder = append(disorder, fmt.Sprintf("%s: %d after %d", topic, s, high))
			default:
				high = s
			}
			seen[s] = true
		}
		for _, s := range seqs {
			if !seen[s] {
				missing++
			}
		}
	}
	return missing, dups, disorder
}

// TestBridgeOutage is the bridge's acceptance test with real processes: a
// local linemq bridges plant/# to a remote linemq (MQTT 5, persistent
// session) while QoS 1 publishers, one per topic, publish to the local
// one. The remote is stopped (SIGTERM); during the outage the local linemq
// is killed with SIGKILL and restarted on its data directory; then the
// remote comes back. Every message the local broker acknowledged must
// reach the remote's persistent subscriber at least once, in publish order
// per topic; duplicates are counted and logged.
func TestBridgeOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("bridge outage test skipped in -short mode")
	}
	began := time.Now()
	dir := t.TempDir()
	two := freeAddrs(t, 2)
	raddr, laddr := two[0], two[1]
	remoteArgs := []string{"-node-id", "site", "-mqtt-listen", raddr, "-http-listen", "", "-data-dir", filepath.Join(dir, "remote")}
	cfg := filepath.Join(dir, "gw1.yaml")
	writeFile(t, cfg, fmt.Sprintf(`node_id: gw1
bridges:
  - name: site
    addresses: [%q]
    reconnect_delay: 200ms
    drain_rate: unlimited
    out:
      - {filter: "plant/#", strip: "plant/", prefix: "site/gw1/"}
`, raddr))
	localArgs := []string{"-config", cfg, "-mqtt-listen", laddr, "-http-listen", "", "-data-dir", filepath.Join(dir, "gw1")}
	run := func(args []string) *daemon {
		d := start(t, args...)
		d.waitLine(t, listening, 10*time.Second)
		return d
	}
	remote, local := run(remoteArgs), run(localArgs)
	local.waitLine(t, regexp.MustCompile(`msg="connected to the remote"`), 10*time.Second)

	// The remote's subscriber: a persistent session, subscribed once.
	c, _, err := dialMQTT(raddr, "site-sub", true)
	if err != nil {
		t.Fatal(err)
	}
	c.Write((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("site/#"), QoS: 1}}}).Append(nil, packet.V5))
	if h, _, err := c.Read(5 * time.Second); err != nil || h.Type != packet.SUBACK {
		t.Fatalf("subscribe: %v %v", h.Type, err)
	}
	c.Conn.Close()

	var stop atomic.Bool
	got := &bridgeTracker{got: make(map[string][]uint64)}
	var recvWG sync.WaitGroup
	recvWG.Add(1)
	go func() {
		defer recvWG.Done()
		readSession(raddr, "site-sub", &stop, func(p *packet.Publish) {
			if seq, err := strconv.ParseUint(string(p.Payload), 10, 64); err == nil {
				// Back to the local topic the bridge mapped it from.
				got.add("plant/"+strings.TrimPrefix(string(p.Topic), "site/gw1/"), seq)
			}
		})
	}()

	// Publishers: one per topic, reconnecting whenever the local broker
	// goes away; a message counts once its PUBACK has arrived.
	topics := []string{"plant/line1/temp", "plant/line2/temp", "plant/line3/alarm"}
	var (
		ackedMu sync.Mutex
		acked   = make(map[string][]uint64)
		total   atomic.Int64
		pubWG   sync.WaitGroup
	)
	for i, topic := range topics {
		pubWG.Add(1)
		go func() {
			defer pubWG.Done()
			publishSeq(laddr, fmt.Sprint("pub-", i), topic, 1, &stop,
				func(seq uint64) []byte { return strconv.AppendUint(nil, seq, 10) },
				func(seq uint64) {
					ackedMu.Lock()
					acked[topic] = append(acked[topic], seq)
					ackedMu.Unlock()
					total.Add(1)
				})
		}()
	}
	// more waits until n more messages have been acknowledged locally.
	more := func(n int64, what string) {
		t.Helper()
		target := total.Load() + n
		deadline := time.Now().Add(15 * time.Second)
		for total.Load() < target {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d acknowledged of %d after 15 s", what, total.Load(), target)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	more(300, "link up")
	remote.cmd.Process.Signal(syscall.SIGTERM)
	if code := remote.exitCode(t, 10*time.Second); code != 0 {
		t.Fatalf("remote exit status %d", code)
	}
	outage := time.Now()
	atOutage := total.Load()
	more(300, "remote down")
	local.cmd.Process.Signal(syscall.SIGKILL)
	<-local.exited
	atKill := total.Load()
	local = run(localArgs)
	more(300, "local restarted, remote down")
	remote = run(remoteArgs)
	back := time.Now()
	// The backlog: what was acknowledged up to now. Publishers go on.
	ackedMu.Lock()
	backlog := make(map[string][]uint64)
	for tp, seqs := range acked {
		backlog[tp] = append([]uint64(nil), seqs...)
	}
	atBack := total.Load()
	ackedMu.Unlock()
	waitAll := func(want map[string][]uint64, what string) {
		t.Helper()
		if !waitFor(20*time.Second, func() bool { m, _, _ := got.check(want); return m == 0 }) {
			missing, _, _ := got.check(want)
			t.Fatalf("%s: %d acknowledged messages never reached the remote", what, missing)
		}
	}
	waitAll(backlog, "backlog")
	drained := time.Since(back)
	more(300, "remote back")
	stop.Store(true)
	pubWG.Wait()
	stop.Store(false)

	n := total.Load()
	waitAll(acked, "all") // the publishers have stopped: acked is final
	// A marker behind everything: a copy the bridge sends again comes first.
	mc, _, err := dialMQTT(laddr, "marker", true)
	if err != nil {
		t.Fatal(err)
	}
	mc.Write((&packet.Publish{Topic: []byte("plant/marker"), QoS: 1, PacketID: 1, Payload: []byte("1")}).Append(nil, packet.V5))
	waitAll(map[string][]uint64{"plant/marker": {1}}, "the marker")
	mc.Conn.Close()
	stop.Store(true)
	recvWG.Wait()
	missing, dups, disorder := got.check(acked)
	for _, d := range disorder {
		t.Errorf("out of publish order: %s", d)
	}
	if missing > 0 {
		t.Errorf("%d acknowledged messages missing", missing)
	}
	t.Logf("%d messages acknowledged locally over %d topics (%d before the SIGKILL), %d received at the remote, %d duplicates",
		n, len(topics), atKill, got.count(), dups)
	t.Logf("remote down %v; the %d messages acknowledged meanwhile (the backlog) all at the remote %v after it came back (publishers running); test %v",
		back.Sub(outage).Round(time.Millisecond), atBack-atOutage, drained.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	if strings.Contains(local.stderr.String(), "level=ERROR") {
		t.Logf("local linemq logged errors:\n%s", local.stderr.String())
	}
}

// TestBridgeConfigError: a bridge configuration error exits with the
// configuration error status (78), naming file, line and key, like any
// other key.
func TestBridgeConfigError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "linemq.yaml")
	writeFile(t, file, `bridges:
  - name: site
    addresses: ["127.0.0.1:1883"]
    protocol: 311
    out:
      - {filter: "plant/#", prefix: "site/"}
    in:
      - {filter: "site/#"}
`)
	d := start(t, "-config", file, "-http-listen", "", "-data-dir", filepath.Join(t.TempDir(), "data"))
	if code := d.exitCode(t, 5*time.Second); code != exitConfig {
		t.Errorf("exit status %d, want %d", code, exitConfig)
	}
	want := file + `:8: bridges[0].in[0].filter: "site/#" may match topics out[0] sends to the remote; with protocol 311 (no No Local) they would loop: make them disjoint, or use protocol 5` + "\n"
	if got := d.stderr.String(); got != want {
		t.Errorf("stderr\n got: %q\nwant: %q", got, want)
	}
}
