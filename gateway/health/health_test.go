package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/health"
)

func newRegistry(t *testing.T) (*health.Registry, *brokertest.FakeClock) {
	t.Helper()
	clk := brokertest.NewFakeClock()
	r := health.New(health.Options{Clock: clk})
	t.Cleanup(r.Close)
	return r, clk
}

// next returns the next change on ch, failing after a deadline.
func next(t *testing.T, ch <-chan health.Change) health.Change {
	t.Helper()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("subscription closed")
		}
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no change within 5s")
		return health.Change{}
	}
}

func TestPushedChecks(t *testing.T) {
	r, clk := newRegistry(t)
	if st := r.Overall(); st != health.OK {
		t.Fatalf("empty registry: %v, want ok", st)
	}
	t0 := clk.Now()
	r.Set("storage", health.OK, "")
	r.Set("listener", health.OK, "")
	clk.Advance(time.Second)
	r.Set("storage", health.Degraded, "commit took 3s")
	if st := r.Overall(); st != health.Degraded {
		t.Fatalf("overall %v, want degraded", st)
	}
	clk.Advance(time.Second)
	// A new reason alone keeps Since: the check has been degraded all along.
	r.Set("storage", health.Degraded, "commit took 4s")
	c, ok := r.Get("storage")
	if !ok || c.State != health.Degraded || c.Reason != "commit took 4s" || !c.Since.Equal(t0.Add(time.Second)) || !c.Updated.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("storage = %+v", c)
	}
	r.Set("listener", health.Failed, "accept: too many open files")
	if st := r.Overall(); st != health.Failed {
		t.Fatalf("overall %v, want failed", st)
	}
	names := []string{}
	for _, c := range r.Checks() {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, ","); got != "listener,storage" {
		t.Fatalf("Checks order %s", got)
	}
	r.Remove("listener")
	if st := r.Overall(); st != health.Degraded {
		t.Fatalf("overall after Remove %v, want degraded", st)
	}
	if _, ok := r.Get("listener"); ok {
		t.Fatal("removed check still there")
	}
}

func TestHealthy(t *testing.T) {
	r, _ := newRegistry(t)
	if ok, reason := r.Healthy(); !ok || reason != "" {
		t.Fatalf("empty: %v %q", ok, reason)
	}
	r.Set("storage", health.Degraded, "slow")
	if ok, reason := r.Healthy(); !ok || reason != "storage: degraded: slow" {
		t.Fatalf("degraded: %v %q", ok, reason)
	}
	r.Set("broker", health.Failed, "wedged")
	if ok, reason := r.Healthy(); ok || reason != "broker: failed: wedged; storage: degraded: slow" {
		t.Fatalf("failed: %v %q", ok, reason)
	}
	r.Set("broker", health.OK, "")
	r.Set("storage", health.OK, "")
	if ok, reason := r.Healthy(); !ok || reason != "" {
		t.Fatalf("recovered: %v %q", ok, reason)
	}
}

func TestSubscribe(t *testing.T) {
	r, _ := newRegistry(t)
	ch, stop := r.Subscribe(8)
	r.Set("a", health.OK, "")
	r.Set("a", health.OK, "") // no change: no notification
	r.Set("a", health.Failed, "down")
	r.Remove("a")

	c := next(t, ch)
	if c.Check.Name != "a" || c.Check.State != health.OK || c.Prev != health.OK || c.Overall != health.OK {
		t.Fatalf("first change %+v", c)
	}
	c = next(t, ch)
	if c.Check.State != health.Failed || c.Prev != health.OK || c.Overall != health.Failed || c.Check.Reason != "down" {
		t.Fatalf("second change %+v", c)
	}
	c = next(t, ch)
	if !c.Removed || c.Overall != health.OK {
		t.Fatalf("third change %+v", c)
	}
	select {
	case c := <-ch:
		t.Fatalf("unexpected change %+v", c)
	default:
	}
	stop()
	if _, ok := <-ch; ok {
		t.Fatal("channel open after stop")
	}
	stop() // twice is fine
}

// TestSubscriberBehind checks that a slow subscriber never blocks the
// registry and ends up with the newest state.
func TestSubscriberBehind(t *testing.T) {
	r, _ := newRegistry(t)
	ch, stop := r.Subscribe(2)
	defer stop()
	for i := range 100 {
		st := health.State(i % 3)
		r.Set("x", st, "")
	}
	r.Set("x", health.Failed, "last")
	var last health.Change
	for len(ch) > 0 {
		last = <-ch
	}
	if last.Check.Reason != "last" || last.Check.State != health.Failed {
		t.Fatalf("newest change lost; last seen %+v", last)
	}
}

func TestPoll(t *testing.T) {
	r, clk := newRegistry(t)
	ch, stop := r.Subscribe(16)
	defer stop()
	calls := make(chan struct{}, 1)
	answers := make(chan error)
	fn := func(ctx context.Context) error {
		calls <- struct{}{}
		return <-answers // ignores ctx: a wedged component
	}
	if err := r.Poll("broker", 5*time.Second, 2*time.Second, fn); err != nil {
		t.Fatal(err)
	}
	if err := r.Poll("broker", time.Second, time.Second, fn); !errors.Is(err, health.ErrExists) {
		t.Fatalf("second Poll: %v, want ErrExists", err)
	}
	c := next(t, ch)
	if c.Check.State != health.Degraded || !c.Check.Polled {
		t.Fatalf("before the first answer: %+v, want degraded", c.Check)
	}

	<-calls
	answers <- nil
	if c := next(t, ch); c.Check.State != health.OK {
		t.Fatalf("after a nil answer: %+v", c.Check)
	}
	waitPending(t, clk, 1) // the next run is scheduled

	clk.Advance(5 * time.Second)
	<-calls
	answers <- health.Degrade(errors.New("probe took 900ms"))
	if c := next(t, ch); c.Check.State != health.Degraded || c.Check.Reason != "probe took 900ms" {
		t.Fatalf("after a degraded answer: %+v", c.Check)
	}
	waitPending(t, clk, 1)

	clk.Advance(5 * time.Second)
	<-calls
	answers <- errors.New("router stuck")
	if c := next(t, ch); c.Check.State != health.Failed || c.Check.Reason != "router stuck" {
		t.Fatalf("after an error: %+v", c.Check)
	}
	waitPending(t, clk, 1)

	// A run that hangs: failed once its timeout passes, and no second run
	// starts while it hangs.
	clk.Advance(5 * time.Second)
	<-calls
	answers <- nil
	if c := next(t, ch); c.Check.State != health.OK {
		t.Fatalf("recovered: %+v", c.Check)
	}
	waitPending(t, clk, 1)
	clk.Advance(5 * time.Second)
	<-calls // hangs from here
	clk.Advance(time.Second)
	select {
	case c := <-ch:
		t.Fatalf("changed before the timeout: %+v", c.Check)
	default:
	}
	clk.Advance(time.Second)
	c = next(t, ch)
	if c.Check.State != health.Failed || c.Check.Reason != "no answer within 2s" {
		t.Fatalf("after the timeout: %+v", c.Check)
	}
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers pending while the check hangs, want 0", n)
	}
	clk.Advance(time.Minute)
	select {
	case <-calls:
		t.Fatal("a second run started while the first hangs")
	default:
	}
	// The late answer is not taken; the next run, an interval later, is.
	answers <- nil
	waitPending(t, clk, 1)
	if c, _ := r.Get("broker"); c.State != health.Failed {
		t.Fatalf("late answer taken: %+v", c)
	}
	clk.Advance(5 * time.Second)
	<-calls
	answers <- nil
	if c := next(t, ch); c.Check.State != health.OK {
		t.Fatalf("after the next run: %+v", c.Check)
	}
}

// TestPollContext checks that a polled function sees its context cancelled
// at its timeout, and at Remove and Close.
func TestPollContext(t *testing.T) {
	r, clk := newRegistry(t)
	ctxs := make(chan context.Context, 1)
	block := func(ctx context.Context) error {
		ctxs <- ctx
		<-ctx.Done()
		return ctx.Err()
	}
	if err := r.Poll("a", time.Second, time.Second, block); err != nil {
		t.Fatal(err)
	}
	ctx := <-ctxs
	clk.Advance(time.Second)
	waitDone(t, ctx)
	if c, _ := r.Get("a"); c.State != health.Failed {
		t.Fatalf("a = %+v", c)
	}

	if err := r.Poll("b", time.Second, time.Hour, block); err != nil {
		t.Fatal(err)
	}
	ctx = <-ctxs
	r.Remove("b")
	waitDone(t, ctx)

	if err := r.Poll("c", time.Second, time.Hour, block); err != nil {
		t.Fatal(err)
	}
	ctx = <-ctxs
	r.Close()
	waitDone(t, ctx)
	if err := r.Poll("d", time.Second, time.Second, block); !errors.Is(err, health.ErrClosed) {
		t.Fatalf("Poll after Close: %v", err)
	}
}

func TestSetOnPolledIgnored(t *testing.T) {
	r, _ := newRegistry(t)
	var n atomic.Int32
	if err := r.Poll("p", time.Hour, time.Hour, func(context.Context) error { n.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 5*time.Second, "first answer", func() bool {
		c, _ := r.Get("p")
		return c.State == health.OK
	})
	r.Set("p", health.Failed, "pushed")
	if c, _ := r.Get("p"); c.State != health.OK {
		t.Fatalf("Set overrode a polled check: %+v", c)
	}
	if err := r.Poll("q", 0, time.Second, nil); err == nil {
		t.Fatal("Poll with a zero interval accepted")
	}
}

func TestCloseEndsSubscriptions(t *testing.T) {
	r, _ := newRegistry(t)
	ch, stop := r.Subscribe(1)
	r.Close()
	if _, ok := <-ch; ok {
		t.Fatal("channel open after Close")
	}
	stop()
	r.Close()
	ch, _ = r.Subscribe(1)
	if _, ok := <-ch; ok {
		t.Fatal("Subscribe after Close returned an open channel")
	}
	r.Set("late", health.Failed, "") // ignored, no panic
}

func TestStateText(t *testing.T) {
	b, err := json.Marshal(map[string]health.State{"a": health.OK, "b": health.Degraded, "c": health.Failed})
	if err != nil || string(b) != `{"a":"ok","b":"degraded","c":"failed"}` {
		t.Fatalf("%s %v", b, err)
	}
	var m map[string]health.State
	if err := json.Unmarshal(b, &m); err != nil || m["b"] != health.Degraded {
		t.Fatalf("%v %v", m, err)
	}
	var s health.State
	if err := s.UnmarshalText([]byte("sick")); err == nil {
		t.Fatal("unknown state accepted")
	}
	if _, err := health.State(9).MarshalText(); err == nil {
		t.Fatal("invalid state marshalled")
	}
}

// waitPending waits until the fake clock has n timers pending: a poll's
// goroutine has recorded its answer and scheduled the next run.
func waitPending(t *testing.T, clk *brokertest.FakeClock, n int) {
	t.Helper()
	brokertest.Eventually(t, 5*time.Second, "next run scheduled", func() bool { return clk.Pending() == n })
}

func waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("context not cancelled within 5s")
	}
}
