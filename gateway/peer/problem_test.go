package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
)

// The words an operator reads for each state of a peer. The raw errors
// are as gRPC, crypto/tls and the acceptor give them.
func TestProblemWording(t *testing.T) {
	const addr = "10.0.0.13:7946"
	dialErr := func(s string) error { return fmt.Errorf("peer: dial gw3 at %s: %s", addr, s) }
	for _, c := range []struct {
		name string
		c    condition
		want string
	}{
		{"fine", condition{connected: true, ready: true}, ""},
		{"never connected, dialling", condition{dial: true}, "no connection yet"},
		{"never connected, accepting", condition{node: "gw3"}, "no connection yet (waiting for gw3 to connect to this node)"},
		{"refused", condition{dial: true, addr: addr, last: dialErr(`rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.13:7946: connect: connection refused"`)},
			"connection refused at 10.0.0.13:7946 (is linemq running there?)"},
		{"untrusted certificate", condition{dial: true, last: dialErr(`rpc error: code = Unavailable desc = connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`)},
			"its certificate is not trusted (signed by an unknown authority)"},
		{"certificate names another node", condition{node: "gw3", dial: true, last: dialErr(`... tls: failed to verify certificate: x509: certificate is valid for gw4, not gw3`)},
			"its certificate does not name gw3"},
		{"certificate expired", condition{dial: true, last: dialErr(`... x509: certificate has expired or is not yet valid: current time ...`)},
			"its certificate has expired or is not yet valid"},
		{"ours refused", condition{dial: true, last: dialErr(`rpc error: code = Unavailable desc = ... remote error: tls: unknown certificate authority`)},
			"it does not accept this node's certificate"},
		{"theirs refuses ours", condition{node: "gw3", dial: true, last: errors.New(`peer: gw3 at 10.0.0.13:7946 refused the stream: peer: certificate does not name node "gw1": x509: certificate is valid for gw9, not gw1`)},
			"it does not accept this node's certificate (it must name this node)"},
		{"TLS on one side: plain dialer", condition{dial: true, last: dialErr(`rpc error: code = Unavailable desc = connection error: desc = "error reading server preface: connection reset by peer"`)},
			"it hung up during the handshake (TLS configured on one of the two nodes only?)"},
		{"TLS on one side: plain acceptor", condition{dial: true, last: dialErr(`... tls: first record does not look like a TLS handshake`)},
			"TLS failed (is TLS configured on both nodes?)"},
		{"unknown to the other node", condition{dial: true, last: errors.New("peer: gw3 at 10.0.0.13:7946 refused the stream: node gw1 is not a peer of gw3")},
			"the other node does not know this node yet (its registry has not caught up, or this node is not registered)"},
		{"another cluster", condition{dial: true, last: errors.New(`peer: gw3 at 10.0.0.13:7946 refused the stream: node gw1 is of cluster "a", this one is "b"`)},
			"it belongs to another cluster"},
		{"someone else answers", condition{dial: true, addr: addr, last: errors.New(`peer: 10.0.0.13:7946 answered as node "gw9" of cluster "line"`)},
			"another node answers at 10.0.0.13:7946 (a stale address?)"},
		{"no answer to the dial", condition{dial: true, addr: addr, last: dialErr("context deadline exceeded")},
			"no answer from 10.0.0.13:7946 (host down, wrong address or a firewall?)"},
		{"no route", condition{dial: true, addr: addr, last: dialErr("connect: no route to host")},
			"no route to 10.0.0.13:7946 (network down or cable pulled?)"},
		{"unresolvable", condition{dial: true, addr: "gw3.plant:7946", last: dialErr("lookup gw3.plant: no such host")},
			"cannot resolve gw3.plant:7946"},
		{"hung", condition{connected: true, breaker: BreakerOpen, cause: causePing, silent: 1500 * time.Millisecond},
			"no answer to pings for 1.5 s (frozen or cut off)"},
		{"hung, probing", condition{connected: true, breaker: BreakerHalfOpen, cause: causePing, silent: 12 * time.Second},
			"no answer to pings for 12 s (frozen or cut off)"},
		{"deliveries time out", condition{connected: true, ready: true, breaker: BreakerOpen, cause: causeTimeouts, threshold: 3},
			"breaker open after 3 delivery timeouts in a row (it answers pings but not deliveries)"},
		{"new stream, no pong yet", condition{connected: true}, "connected, waiting for the first answer to a ping"},
		{"back after a break", condition{connected: true, breaker: BreakerOpen, cause: causeBroken},
			"reconnected after the connection was lost, waiting for an answer to a ping"},
		{"lost, dialling", condition{dial: true, last: fmt.Errorf("%w: EOF", ErrBroken)},
			"connection lost (the other node stopped, restarted or was cut off); reconnecting"},
		{"lost, accepting", condition{last: fmt.Errorf("%w: rpc error: code = Canceled desc = context canceled", ErrBroken)},
			"connection lost (the other node stopped, restarted or was cut off); waiting for it to reconnect"},
		{"moved", condition{dial: true, last: fmt.Errorf("%w: address changed", ErrBroken)}, "reconnecting: it registered a new address"},
		{"unreadable", condition{last: fmt.Errorf("%w: %v", ErrBroken, errMalformed)},
			"it sent frames this node cannot read (linemq versions too far apart?)"},
		{"closing", condition{last: ErrClosed}, "this node is shutting down"},
		{"anything else", condition{dial: true, last: errors.New("peer: something new")}, "cannot connect: peer: something new"},
	} {
		if got := c.c.describe(); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// The Problem of real failures, as Stats reports them: a port nobody
// listens on, a frozen peer, a peer that does not know this node.
func TestProblemLive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	a := startNode(t, "a", fast(Options{}))
	a.SetPeers(map[string]string{"b": closed})
	brokertest.Eventually(t, 5*time.Second, "a's dial is refused", func() bool { return stats(t, a, "b").DialErrors > 0 })
	if p := stats(t, a, "b").Problem; p != "connection refused at "+closed+" (is linemq running there?)" {
		t.Fatalf("nobody listening: %q", p)
	}

	c := startNode(t, "c", fast(Options{}))
	a.SetPeers(map[string]string{"c": c.addr}) // c does not know a yet
	brokertest.Eventually(t, 5*time.Second, "c refuses a", func() bool {
		return strings.Contains(stats(t, a, "c").LastError, "not a peer")
	})
	if p := stats(t, a, "c").Problem; p != "the other node does not know this node yet (its registry has not caught up, or this node is not registered)" {
		t.Fatalf("unknown to the other node: %q", p)
	}
	connect(a, c)
	waitAvailable(t, a, "c", true)
	if p := stats(t, a, "c").Problem; p != "" {
		t.Fatalf("a healthy peer's problem: %q", p)
	}
	unblock := make(chan struct{})
	c.h.forward = func(string, *broker.Message) { <-unblock }
	t.Cleanup(func() { close(unblock) })
	if err := a.Send("c", msg("block", "")); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, a, "c", false)
	if p := stats(t, a, "c").Problem; !strings.HasPrefix(p, "no answer to pings for ") || !strings.HasSuffix(p, " s (frozen or cut off)") {
		t.Fatalf("frozen: %q", p)
	}
}

// Every directed delivery is counted once, in Deliveries and in one
// outcome.
func TestDeliveryOutcomesCounted(t *testing.T) {
	o := fast(Options{MaxInFlight: 1})
	a := startNode(t, "a", o)
	b := startNode(t, "b", fast(Options{}))
	held := make(chan Reply, 8)
	b.h.deliver = func(_ string, to Target, _ *broker.Message, r Reply) {
		switch to.Client {
		case "here":
			r.Done(true, nil)
		case "gone":
			r.Done(false, nil)
		case "full":
			r.Done(false, errors.New("disk full"))
		default:
			held <- r
		}
	}
	connect(a, b)
	waitAvailable(t, a, "b", true)
	one := func(client string) error {
		return outcome(t, deliver(a, context.Background(), "b", Target{Client: client}, msg("t", "")), 5*time.Second)
	}
	if err := one("here"); err != nil {
		t.Fatal(err)
	}
	if err := one("gone"); !errors.Is(err, ErrNotHere) {
		t.Fatal(err)
	}
	var re *RemoteError
	if err := one("full"); !errors.As(err, &re) {
		t.Fatal(err)
	}
	if err := one("mute"); !errors.Is(err, ErrTimeout) {
		t.Fatal(err)
	}
	// One waits (the window is one), so the next is refused at once.
	ctx, cancel := context.WithCancel(context.Background())
	waiting := deliver(a, ctx, "b", Target{Client: "mute"}, msg("t", ""))
	<-held
	if err := one("here"); !errors.Is(err, ErrQueueFull) {
		t.Fatal(err)
	}
	cancel()
	if err := outcome(t, waiting, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	s := stats(t, a, "b")
	want := PeerStats{Deliveries: 6, Accepted: 1, NotHere: 1, RemoteErrors: 1, Timeouts: 1, Refused: 1, Cancelled: 1}
	got := PeerStats{Deliveries: s.Deliveries, Accepted: s.Accepted, NotHere: s.NotHere, RemoteErrors: s.RemoteErrors,
		Timeouts: s.Timeouts, Refused: s.Refused, Cancelled: s.Cancelled, Broken: s.Broken, ExpiredByPeer: s.ExpiredByPeer}
	if got != want {
		t.Fatalf("counted %+v\nwant    %+v", got, want)
	}
}

// Stats serve the status page as they are: snake_case names, the
// breaker by name, round trips in seconds.
func TestStatsJSON(t *testing.T) {
	s := PeerStats{Node: "gw3", Breaker: BreakerHalfOpen, Problem: "no connection yet", InFlight: 2,
		LateAccepted: 1, RTT: 1500 * time.Microsecond, RTTMax: 2 * time.Second}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"node":"gw3"`, `"breaker":"half-open"`, `"problem":"no connection yet"`,
		`"in_flight":2`, `"late_accepted":1`, `"rtt_seconds":0.0015`, `"rtt_max_seconds":2`, `"rtt_mean_seconds":0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	if strings.ContainsAny(strings.ReplaceAll(string(b), `"problem":"no connection yet"`, ""), "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
		t.Errorf("a name not in snake_case: %s", b)
	}
	var back PeerStats
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}
