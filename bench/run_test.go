package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// runOK runs cfg, failing the test on an error or if it takes too long.
func runOK(t *testing.T, cfg Config) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if testing.Verbose() {
		var b strings.Builder
		res.WriteTable(&b)
		t.Log("\n" + b.String())
	}
	return res
}

// runErr runs cfg, which must fail, within limit.
func runErr(t *testing.T, cfg Config, limit time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, cfg)
	if err == nil {
		t.Fatalf("Run succeeded, want an error; result %+v", res)
	}
	if d := time.Since(start); d > limit {
		t.Errorf("Run took %v to fail, want under %v", d, limit)
	}
	t.Logf("error (as expected): %v", err)
	return err
}

// checkExact asserts a run in which every message arrived exactly once.
func checkExact(t *testing.T, res *Result, published, perReceiver int64) {
	t.Helper()
	checkExactForeign(t, res, published, perReceiver, 0)
}

// checkExactForeign is checkExact for a run that also received foreign
// messages.
func checkExactForeign(t *testing.T, res *Result, published, perReceiver, foreign int64) {
	t.Helper()
	n := int64(res.Receivers)
	want := published * perReceiver / n // deliveries per receiver
	if res.Publishers == 0 {
		t.Fatal("no publishers in the result")
	}
	if res.Published != published || res.Acked != published || res.Unacked != 0 || res.Refused != 0 {
		t.Errorf("published %d acked %d unacked %d refused %d, want %d acked, none unacked or refused",
			res.Published, res.Acked, res.Unacked, res.Refused, published)
	}
	if res.Delivered != published*perReceiver || res.Expected != published*perReceiver || res.Distinct != res.Expected {
		t.Errorf("delivered %d, distinct %d, expected %d; want %d each", res.Delivered, res.Distinct, res.Expected, published*perReceiver)
	}
	if res.Lost != 0 || res.Duplicates != 0 || res.Foreign != foreign {
		t.Errorf("lost %d duplicates %d foreign %d, want 0, 0, %d", res.Lost, res.Duplicates, res.Foreign, foreign)
	}
	for i, c := range res.ReceiverCounts {
		if c != want {
			t.Errorf("receiver %d got %d messages, want %d (counts %v)", i, c, want, res.ReceiverCounts)
		}
	}
	if res.ShareMin == nil || *res.ShareMin != 1 || *res.ShareMax != 1 {
		t.Errorf("share min/max %s/%s, want exactly 1/1", opt(res.ShareMin, "%v"), opt(res.ShareMax, "%v"))
	}
	if res.PublishRate <= 0 || res.DeliveryRate <= 0 {
		t.Errorf("rates %v/%v, want positive", res.PublishRate, res.DeliveryRate)
	}
}

func TestFanIn(t *testing.T) {
	for _, v := range []packet.Version{packet.V5, packet.V311} {
		for qos := byte(0); qos <= 2; qos++ {
			t.Run(fmt.Sprintf("mqtt%s/qos%d", versionName(v), qos), func(t *testing.T) {
				_, addr := brokertest.RunServer(t, broker.Options{})
				res := runOK(t, Config{
					Broker: addr, Version: v, QoS: qos, Publishers: 4, Workers: 2, Count: 500,
					// A window no worker can fill: round robin then never
					// passes a member over and the split is exact.
					WorkerReceiveMax: 65535,
				})
				checkExact(t, res, 2000, 1)
				if res.LatencyP50Ms != nil || res.LatencySamples != 0 {
					t.Errorf("unpaced run reported latency %v (%d samples)", *res.LatencyP50Ms, res.LatencySamples)
				}
				if res.Group != DefaultGroup || res.MQTT != versionName(v) || res.QoS != int(qos) {
					t.Errorf("result describes group %q MQTT %q QoS %d", res.Group, res.MQTT, res.QoS)
				}
			})
		}
	}
}

func TestFanOut(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	res := runOK(t, Config{Broker: addr, Scenario: FanOut, QoS: 1, Publishers: 2, Subscribers: 3, Count: 300})
	if res.Expected != 3*600 {
		t.Errorf("expected %d, want 3 x 600", res.Expected)
	}
	checkExact(t, res, 600, 3)
}

func TestPacedLatency(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	start := time.Now()
	res := runOK(t, Config{Broker: addr, QoS: 1, Publishers: 2, Workers: 2, Count: 200, Rate: 2000})
	// 400 messages at 2,000/s: 0.2 s of publishing at least.
	if d := time.Since(start); d < 190*time.Millisecond {
		t.Errorf("paced run took %v, want at least 0.2 s", d)
	}
	if res.PublishRate > 2400 {
		t.Errorf("publish rate %.0f, want about 2000", res.PublishRate)
	}
	checkExact(t, res, 400, 1)
	if res.LatencyP50Ms == nil {
		t.Fatal("paced run reported no latency")
	}
	if res.LatencySamples != res.Delivered {
		t.Errorf("%d latency samples for %d deliveries", res.LatencySamples, res.Delivered)
	}
	p50, p99, p999, mx := *res.LatencyP50Ms, *res.LatencyP99Ms, *res.LatencyP999Ms, *res.LatencyMaxMs
	if !(0 < p50 && p50 <= p99 && p99 <= p999 && p999 <= mx && mx < 5000) {
		t.Errorf("latency p50 %v p99 %v p999 %v max %v ms: want 0 < p50 <= p99 <= p999 <= max < 5 s", p50, p99, p999, mx)
	}
}

func TestConns(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	for _, v := range []packet.Version{packet.V5, packet.V311} {
		t.Run("mqtt"+versionName(v), func(t *testing.T) {
			// The broker runs in this process, so its memory is ours.
			res := runOK(t, Config{Broker: addr, Version: v, Scenario: Conns, Conns: 200, PID: os.Getpid(), Settle: 200 * time.Millisecond})
			if res.Conns != 200 {
				t.Errorf("%d connections open at the measurement, want 200", res.Conns)
			}
			if res.BytesPerConn == nil || *res.BytesPerConn <= 0 {
				t.Errorf("bytes per connection %s, want positive; notes %q", opt(res.BytesPerConn, "%v"), res.Notes)
			}
			if res.ConnRate == nil || *res.ConnRate <= 0 || res.BrokerCPUS == nil || res.BrokerPeakRSSMiB == nil || *res.BrokerPeakRSSMiB <= 0 {
				t.Errorf("connection rate %s, broker cpu %s, peak rss %s: want all measured",
					opt(res.ConnRate, "%v"), opt(res.BrokerCPUS, "%v"), opt(res.BrokerPeakRSSMiB, "%v"))
			}
		})
	}
}

func TestConnsNeedsPID(t *testing.T) {
	err := runErr(t, Config{Scenario: Conns, Conns: 10}, time.Second)
	if !strings.Contains(err.Error(), "pid") {
		t.Errorf("error %q does not mention the pid", err)
	}
}

func TestBrokerFigures(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	res := runOK(t, Config{Broker: addr, Publishers: 2, Workers: 2, Count: 1000, PID: os.Getpid()})
	if res.BrokerCPUS == nil || res.BrokerPeakRSSMiB == nil || res.BrokerHWMMiB == nil {
		t.Fatal("broker figures missing with a pid")
	}
	if *res.BrokerPeakRSSMiB <= 0 || *res.BrokerHWMMiB < *res.BrokerPeakRSSMiB {
		t.Errorf("peak RSS %v MiB, high-water mark %v MiB: want 0 < peak <= hwm", *res.BrokerPeakRSSMiB, *res.BrokerHWMMiB)
	}
	if res.BenchCPUS <= 0 {
		t.Errorf("bench cpu %v, want positive", res.BenchCPUS)
	}
}

// denyAuth refuses every subscription and publish.
type denyAuth struct{ broker.AllowAll }

func (denyAuth) CanSubscribe(broker.ClientInfo, string) bool { return false }
func (denyAuth) CanPublish(broker.ClientInfo, string) bool   { return false }

func TestSubscriptionRefused(t *testing.T) {
	cases := []struct {
		name  string
		opts  broker.Options
		v     packet.Version
		want  string
		conns uint64 // connections the broker accepts before the run fails
	}{
		{"v5 SUBACK not authorized", broker.Options{Auth: denyAuth{}}, packet.V5, "refused: mqtt: not authorized", 2},
		{"3.1.1 SUBACK failure", broker.Options{DisableSharedSubs: true}, packet.V311, "refused (SUBACK return code 0x80)", 2},
		{"v5 CONNACK without shared subscriptions", broker.Options{DisableSharedSubs: true}, packet.V5, "does not support shared subscriptions", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, addr := brokertest.RunServer(t, c.opts)
			err := runErr(t, Config{Broker: addr, Version: c.v, QoS: 1, Publishers: 1, Workers: 2, Count: 10}, 3*time.Second)
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want it to contain %q", err, c.want)
			}
			// The run ends right after a CONNACK, while the broker may
			// still be finishing that CONNECT; shutting it down then
			// trips a data race in the broker (conn.connected, written by
			// handleConnect, read by kickWith under wmu). Wait for the
			// broker to be done with every connection first.
			brokertest.Eventually(t, 5*time.Second, "the broker to finish the run's connections", func() bool {
				st := srv.Stats()
				return st.Connects >= c.conns && st.ClientsConnected == 0
			})
		})
	}
}

func TestPublishRefused(t *testing.T) {
	// Only publishing is refused: the broker answers each QoS 1 PUBLISH
	// with PUBACK 0x87, which the run counts rather than fails on.
	_, addr := brokertest.RunServer(t, broker.Options{Auth: publishDenied{}})
	res := runOK(t, Config{Broker: addr, QoS: 1, Publishers: 2, Workers: 1, Count: 50, Drain: time.Second})
	if res.Refused != 100 || res.Acked != 0 || res.Delivered != 0 || res.Lost != 0 {
		t.Errorf("refused %d acked %d delivered %d lost %d, want 100/0/0/0", res.Refused, res.Acked, res.Delivered, res.Lost)
	}
	if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "refused 100") }) {
		t.Errorf("notes %q do not report the refusals", res.Notes)
	}
}

type publishDenied struct{ broker.AllowAll }

func (publishDenied) CanPublish(broker.ClientInfo, string) bool { return false }

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	runErr(t, Config{Broker: addr, Count: 10, Timeout: 2 * time.Second}, 2*time.Second)
}

func TestSilentBroker(t *testing.T) {
	// Accepts connections and never answers CONNECT.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	err = runErr(t, Config{Broker: l.Addr().String(), Count: 10, Timeout: 300 * time.Millisecond}, 2*time.Second)
	if !strings.Contains(err.Error(), "CONNACK") {
		t.Errorf("error %q does not say what was awaited", err)
	}
}

func TestBrokerGoesAway(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	time.AfterFunc(300*time.Millisecond, func() { srv.Shutdown(context.Background()) })
	// Which connection notices first, and how (DISCONNECT 0x8B, EOF, a
	// reset on write), is a race; that the run fails promptly is not.
	runErr(t, Config{Broker: addr, QoS: 1, Publishers: 2, Workers: 2, Duration: 10 * time.Second, Rate: 1000}, 3*time.Second)
}

func TestInterrupted(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	res, err := Run(ctx, Config{Broker: addr, QoS: 1, Publishers: 2, Workers: 2, Duration: 10 * time.Second, Rate: 1000})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("interrupted run took %v", d)
	}
	if res.Published == 0 || !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.HasPrefix(n, "interrupted") }) {
		t.Errorf("published %d, notes %q: want a partial result marked interrupted", res.Published, res.Notes)
	}
}

func TestForeignMessagesIgnored(t *testing.T) {
	// A retained message on a bench topic, from someone else: 3.1.1 has no
	// Retain Handling, so the fanout subscribers receive it and must not
	// count it as a loss or duplicate.
	_, addr := brokertest.RunServer(t, broker.Options{})
	cl, _ := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V311, CleanStart: true, ClientID: []byte("other")})
	cl.Publish(&packet.Publish{Retain: true, Topic: []byte("plant/line0/dev0/telemetry"), Payload: bytes.Repeat([]byte{1}, 40)})
	cl.Send((&packet.Disconnect{}).Append(nil, packet.V311))
	time.Sleep(50 * time.Millisecond) // the retained message is stored on the broker's reader
	res := runOK(t, Config{Broker: addr, Version: packet.V311, Scenario: FanOut, QoS: 1, Publishers: 1, Subscribers: 2, Count: 100})
	// The retained message arrives once per subscriber.
	checkExactForeign(t, res, 100, 2, 2)
}

// TestResultJSON checks that the JSON line has exactly the keys the package
// documentation lists, so the two cannot drift apart.
func TestResultJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := (&Result{Scenario: "fanin"}).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Count(buf.String(), "\n") != 1 || !strings.HasSuffix(buf.String(), "\n") {
		t.Errorf("WriteJSON wrote %q, want one line", buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)

	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	in := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "// # Result fields"):
			in = true
		case in && strings.HasPrefix(line, "//\t"):
			keys, _, _ := strings.Cut(line[3:], "  ") // "key" or "key1, key2", then the description
			want = append(want, strings.Split(keys, ", ")...)
		case in && strings.HasPrefix(line, "// Broker figures"):
			in = false
		}
	}
	slices.Sort(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JSON keys and documented keys differ:\n json %q\n doc  %q", got, want)
	}
	if m["latency_p50_ms"] != nil || m["share_min"] != nil {
		t.Errorf("unmeasured fields are %v and %v, want null", m["latency_p50_ms"], m["share_min"])
	}
}

func TestValidate(t *testing.T) {
	bad := []Config{
		{Scenario: "bogus"},
		{QoS: 3},
		{Version: 3},
		{PayloadSize: 8},
		{Group: "a/b"},
		{Rate: -1},
		{Inflight: 70000},
		{Scenario: Conns},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the zero Config is invalid: %v", err)
	}
}

// mute is a broker that accepts connections and subscriptions and then
// ignores everything: it never acknowledges a PUBLISH.
func mute(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, nc)
			wg.Go(func() {
				fr := newFrameReader(nc, 4096, &clock{base: time.Now()})
				for {
					h, body, err := fr.next()
					if err != nil {
						return
					}
					switch h.Type {
					case packet.CONNECT:
						nc.Write((&packet.Connack{}).Append(nil, packet.V5))
					case packet.SUBSCRIBE:
						var s packet.Subscribe
						s.Decode(packet.V5, body)
						nc.Write((&packet.Suback{PacketID: s.PacketID, Reasons: []packet.ReasonCode{packet.GrantedQoS1}}).Append(nil, packet.V5))
					}
				}
			})
		}
	})
	return l.Addr().String()
}

func TestStalledBroker(t *testing.T) {
	err := runErr(t, Config{Broker: mute(t), QoS: 1, Publishers: 2, Workers: 1, Count: 1000, Timeout: 500 * time.Millisecond}, 3*time.Second)
	if !strings.Contains(err.Error(), "no publish sent or acknowledged") {
		t.Errorf("error %q, want the stall reported", err)
	}
}
