package bridge

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker/brokertest"
)

// mosquittoBin returns Debian's Mosquitto, or skips the test without it.
func mosquittoBin(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/mosquitto"); err == nil {
		return "/usr/sbin/mosquitto"
	}
	t.Skip("mosquitto not installed (apt-get install mosquitto; .ci/run installs it): the tests with Mosquitto as the remote are skipped")
	return ""
}

// mosquitto is a Mosquitto process on a loopback port the OS chose once,
// without persistence, which a test stops and starts again.
type mosquitto struct {
	t      *testing.T
	bin    string
	conf   string
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    syncBuffer
}

func startMosquitto(t *testing.T) *mosquitto {
	dir := t.TempDir()
	// Started as root, Mosquitto runs as the user mosquitto, who must be
	// able to read the file again on a reload.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := &mosquitto{t: t, bin: mosquittoBin(t), conf: filepath.Join(dir, "mosquitto.conf")}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.addr = l.Addr().String()
	l.Close()
	m.start("")
	t.Cleanup(func() {
		m.stop()
		if t.Failed() {
			t.Logf("mosquitto log:\n%s", m.log.String())
		}
	})
	return m
}

// writeConf writes the configuration, with extra lines.
func (m *mosquitto) writeConf(extra string) {
	_, port, _ := net.SplitHostPort(m.addr)
	conf := fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 100000\nlog_dest stderr\n%s", port, extra)
	if err := os.WriteFile(m.conf, []byte(conf), 0o644); err != nil {
		m.t.Fatal(err)
	}
}

// start starts Mosquitto (again) and waits until it accepts connections.
func (m *mosquitto) start(extra string) {
	m.t.Helper()
	m.writeConf(extra)
	brokertest.Eventually(m.t, wait, "mosquitto listening on "+m.addr, func() bool {
		m.cmd = exec.Command(m.bin, "-c", m.conf)
		m.cmd.Stdout, m.cmd.Stderr = &m.log, &m.log
		if err := m.cmd.Start(); err != nil {
			m.t.Fatal(err)
		}
		m.exited = make(chan struct{})
		go func(cmd *exec.Cmd, exited chan struct{}) { cmd.Wait(); close(exited) }(m.cmd, m.exited)
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			select {
			case <-m.exited: // the port is not free yet: try again
				return false
			default:
			}
			if c, err := net.Dial("tcp", m.addr); err == nil {
				c.Close()
				return true
			}
		}
		m.stop()
		return false
	})
}

// reload rewrites the configuration and has Mosquitto read it again.
func (m *mosquitto) reload(extra string) {
	m.writeConf(extra)
	if err := m.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		m.t.Fatal(err)
	}
}

func (m *mosquitto) stop() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(5 * time.Second):
		m.cmd.Process.Kill()
		<-m.exited
	}
	m.cmd = nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMosquitto runs a bridge to Debian's Mosquitto, MQTT 5 and 3.1.1:
// commands come in and telemetry goes out with their topics remapped;
// Mosquitto is stopped while publishers go on publishing and started
// again: every QoS 1 message the local broker acknowledged reaches
// Mosquitto's subscriber, in publish order per topic, at least once.
//
// Mosquitto runs without persistence, so its subscriber's session goes
// with it. When it comes back it first admits only the subscriber
// (clientid_prefixes), which subscribes again, and then, reloaded, the
// bridge: otherwise what the bridge sent before the subscriber was back
// would be Mosquitto's to drop, not the bridge's. For the same reason
// the traffic pauses, the bridge's queue empty, at the moment Mosquitto
// is stopped: a message Mosquitto has acknowledged but not yet passed on
// dies with it.
func TestMosquitto(t *testing.T) { forProtocols(t, testMosquitto) }

func testMosquitto(t *testing.T, protocol int) {
	mq, local := startMosquitto(t), newNode(t)
	cfg := siteConfig(mq.addr)
	cfg.Protocol = protocol
	b := local.bridge(cfg, "gw1")
	brokertest.Eventually(t, wait, "bridge connected", func() bool { return b.Stats().State == StateConnected })
	atRemote := collect(t, mq.addr, "collector-site", "site/#", "cmd/#")
	atLocal := collect(t, local.addr, "plc", "cmd/#")
	toRemote := func(s string) string { return "site/gw1/" + strings.TrimPrefix(s, "plant/") }

	// In: commands published at Mosquitto reach the local subscriber.
	cmds := publish(t, mq.addr, "collector-scada", []string{"cmd/gw1/setpoint"}, 20)
	brokertest.Eventually(t, wait, "20 commands locally", func() bool { return atLocal.count() >= 20 })
	if d := verify(t, atLocal.snapshot(), func(s string) string { return s }, cmds); d != 0 {
		t.Errorf("%d duplicate commands", d)
	}

	// Out, with the link up.
	topics := []string{"plant/a", "plant/b", "plant/c"}
	acked := publish(t, local.addr, "pub1", topics, 30)
	brokertest.Eventually(t, wait, "90 at Mosquitto", func() bool { return atRemote.count() >= 20+90 })
	brokertest.Eventually(t, wait, "queue empty", func() bool { s := b.Stats(); return s.Queued == 0 && s.Inflight == 0 })

	// Out, while Mosquitto is down and after: publishers run throughout.
	down := time.Now()
	mq.stop()
	brokertest.Eventually(t, wait, "bridge down", func() bool { return b.Stats().State != StateConnected })
	var (
		stop     atomic.Bool
		mu       sync.Mutex
		pubErr   error
		pubDone  = make(chan struct{})
		enqueued = b.Stats().Enqueued
	)
	pub := collect(t, local.addr, "pub2")
	go func() {
		defer close(pubDone)
		for i := 31; !stop.Load(); i++ {
			for _, tp := range topics {
				if _, err := pub.cm.Publish(t.Context(), &paho.Publish{Topic: tp, QoS: 1, Payload: fmt.Append(nil, i)}); err != nil {
					mu.Lock()
					pubErr = fmt.Errorf("publish %s %d: %w", tp, i, err)
					mu.Unlock()
					return
				}
				mu.Lock()
				acked[tp] = i
				mu.Unlock()
			}
		}
	}()
	brokertest.Eventually(t, wait, "300 queued while Mosquitto is down", func() bool { return b.Stats().Enqueued >= enqueued+300 })
	mq.start("clientid_prefixes collector-\n")
	brokertest.Eventually(t, wait, "subscriber back", func() bool { return atRemote.subs.Load() >= 2 })
	sent := b.Stats().Sent
	if b.Stats().State == StateConnected {
		t.Fatal("the bridge connected while Mosquitto admitted only collector-*")
	}
	mq.reload("")
	brokertest.Eventually(t, wait, "bridge connected again", func() bool { return b.Stats().State == StateConnected })
	t.Logf("link down for %v, %d queued when it came back", time.Since(down).Round(time.Millisecond), b.Stats().Queued)
	brokertest.Eventually(t, wait, "300 more sent", func() bool { return b.Stats().Sent >= sent+300 })
	stop.Store(true)
	<-pubDone
	if pubErr != nil {
		t.Fatal(pubErr)
	}
	mu.Lock()
	want := 0
	for _, n := range acked {
		want += n
	}
	mu.Unlock()
	brokertest.Eventually(t, wait, "every acknowledged message at Mosquitto", func() bool {
		seen := make(map[string]bool)
		for _, p := range atRemote.snapshot() {
			seen[p.Topic+" "+string(p.Payload)] = true
		}
		return len(seen) >= 20+want
	})
	// A marker behind everything: a copy the bridge sends again comes first.
	publish(t, local.addr, "marker", []string{"plant/marker"}, 1)
	brokertest.Eventually(t, wait, "the marker at Mosquitto", func() bool {
		return slices.ContainsFunc(atRemote.snapshot(), func(p *paho.Publish) bool { return p.Topic == "site/gw1/marker" })
	})
	var out []*paho.Publish
	for _, p := range atRemote.snapshot() {
		if strings.HasPrefix(p.Topic, "site/") && p.Topic != "site/gw1/marker" {
			out = append(out, p)
		}
	}
	dups := verify(t, out, toRemote, acked)
	st := b.Stats()
	t.Logf("MQTT %d: %d messages acknowledged locally over 3 topics, %d at Mosquitto, %d duplicates; sent %d, retries %d",
		protocol, want, len(out), dups, st.Sent, st.Retries)
}
