package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
)

// offsetClock is a node clock put off by off from a shared epoch: two
// nodes' readings differ by off, as two gateways' clocks do.
func offsetClock(epoch time.Time, off time.Duration) func() int64 {
	return func() int64 { return int64(time.Since(epoch) + off) }
}

// A node whose reader is held longer than DeliverTimeout (a frozen node:
// its clock runs on, it reads nothing) gets deliveries its peer has since
// completed with ErrTimeout and re-picked. When it reads on, it must not
// hand them to its Handler: it answers "expired", counts them, and the
// sender counts the answers as late but not accepted. The two nodes'
// clocks are an hour apart either way, or together: the baseline absorbs
// the offset, so fresh deliveries are never taken for old ones.
func TestFrozenReceiverDoesNotDeliverWhatTimedOut(t *testing.T) {
	for _, off := range []time.Duration{0, time.Hour, -time.Hour} {
		t.Run(fmt.Sprintf("offset %v", off), func(t *testing.T) { testFrozenReceiver(t, off) })
	}
}

func testFrozenReceiver(t *testing.T, off time.Duration) {
	epoch := time.Now()
	o := fast(Options{})
	oa, ob := o, o
	oa.clock, ob.clock = offsetClock(epoch, 0), offsetClock(epoch, off)
	a := startNode(t, "a", oa)
	b := startNode(t, "b", ob)
	unfreeze := make(chan struct{})
	var once sync.Once
	thaw := func() { once.Do(func() { close(unfreeze) }) }
	t.Cleanup(thaw)
	b.h.forward = func(_ string, m *broker.Message) {
		if m.Topic == "freeze" {
			<-unfreeze // b's reader is stuck: b reads nothing more, as if stopped
		}
	}
	connect(a, b)
	waitAvailable(t, a, "b", true)
	waitAvailable(t, b, "a", true)
	to := Target{Group: "g", Filter: "t/#", Client: "c"}

	// Fresh deliveries both ways are delivered, whatever the offset.
	const fresh = 50
	for i := range fresh {
		if err := outcome(t, deliver(a, context.Background(), "b", to, msg("t/before", fmt.Sprint(i))), 5*time.Second); err != nil {
			t.Fatalf("fresh delivery a→b %d: %v", i, err)
		}
		if err := outcome(t, deliver(b, context.Background(), "a", to, msg("t/before", fmt.Sprint(i))), 5*time.Second); err != nil {
			t.Fatalf("fresh delivery b→a %d: %v", i, err)
		}
	}
	drain(b.h.delivered, fresh)
	drain(a.h.delivered, fresh)

	// Freeze b, then deliver three: a gives up on them.
	if err := a.Send("b", msg("freeze", "")); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	var chs []<-chan error
	for i := range 3 {
		chs = append(chs, deliver(a, context.Background(), "b", to, msg("t/frozen", fmt.Sprint(i))))
	}
	for i, ch := range chs {
		if err := outcome(t, ch, 5*time.Second); !errors.Is(err, ErrTimeout) {
			t.Fatalf("delivery %d to the frozen node: %v, want ErrTimeout", i, err)
		}
	}
	t.Logf("a gave up on the three %v after the freeze (DeliverTimeout %v, pong timeout %v)",
		time.Since(frozen).Round(time.Millisecond), o.DeliverTimeout, o.PingTimeout)
	// Keep b frozen past DeliverTimeout, as the brief's SIGSTOP was.
	time.Sleep(time.Until(frozen.Add(o.DeliverTimeout + 50*time.Millisecond)))
	thaw()
	thawed := time.Now()

	brokertest.Eventually(t, 5*time.Second, "b's answers to the three reach a", func() bool {
		return stats(t, a, "b").Late == 3
	})
	t.Logf("b answered them %v after it read on", time.Since(thawed).Round(time.Millisecond))
	if n := len(b.h.delivered); n != 0 {
		t.Fatalf("b's handler got %d deliveries its peer had given up on: duplicates (a counts %d late accepted)",
			n, stats(t, a, "b").LateAccepted)
	}
	sa, sb := stats(t, a, "b"), stats(t, b, "a")
	if sa.Timeouts != 3 || sa.LateAccepted != 0 || sa.LateExpired != 3 || sa.Accepted != fresh || sa.Deliveries != fresh+3 {
		t.Fatalf("a's figures for b: %+v", sa)
	}
	if sb.Expired != 3 || sb.Accepted != fresh || sa.Expired != 0 {
		t.Fatalf("b's figures for a: %+v", sb)
	}

	// b is back: what a sends now is delivered.
	waitAvailable(t, a, "b", true)
	if err := outcome(t, deliver(a, context.Background(), "b", to, msg("t/after", "")), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, b.h.delivered); r.m.Topic != "t/after" {
		t.Fatalf("b got %s", r.m.Topic)
	}
	if e := stats(t, b, "a").Expired; e != 3 {
		t.Fatalf("b expired %d, want still 3", e)
	}
}

// drain takes n records off ch.
func drain(ch <-chan received, n int) {
	for range n {
		<-ch
	}
}

// TestMissedPongRefusesRepick: when a missed pong fails the deliveries
// waiting on a peer, the peer is already unavailable as their callbacks
// run, so one picked again for the same peer from a callback (the broker
// picks again there) is refused at once rather than waiting out its own
// deadline on a peer that does not answer (a publisher on a gateway cut
// off from the others waited 1.4 s + 2 s).
func TestMissedPongRefusesRepick(t *testing.T) {
	o := fast(Options{})
	o.DeliverTimeout = time.Minute // only the missed pong may fail the first delivery
	a := startNode(t, "a", o)
	b := startNode(t, "b", o)
	unfreeze := make(chan struct{})
	t.Cleanup(func() { close(unfreeze) })
	b.h.forward = func(_ string, m *broker.Message) {
		if m.Topic == "freeze" {
			<-unfreeze
		}
	}
	connect(a, b)
	waitAvailable(t, a, "b", true)
	if err := a.Send("b", msg("freeze", "")); err != nil {
		t.Fatal(err)
	}
	to := Target{Group: "g", Filter: "t/#", Client: "c"}
	again := make(chan error, 1)
	first := make(chan error, 1)
	err := a.Deliver(context.Background(), "b", to, msg("t/x", "1"), func(err error) {
		again <- a.Deliver(context.Background(), "b", to, msg("t/x", "2"), func(error) {})
		first <- err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := outcome(t, first, 10*time.Second); !errors.Is(err, ErrTimeout) {
		t.Fatalf("the delivery to the silent peer: %v, want ErrTimeout", err)
	}
	if err := <-again; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("picked again for the same peer from the callback: %v, want ErrUnavailable at once", err)
	}
}
