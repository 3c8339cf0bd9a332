package auth

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// fakeNow is a clock the test moves by hand.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// TestThrottleSpacing: exactly free failures go unhindered; the check
// after them waits the base delay, and the spacing doubles up to the cap.
func TestThrottleSpacing(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1e9, 0)}
	th := newThrottle(3, time.Second, 4*time.Second, time.Minute, 16, clock.now)
	far := clock.now().Add(time.Hour)
	start := clock.now()
	reserve := func(key string, limit time.Time) (time.Time, bool) {
		t.Helper()
		slot, wait, ok := th.reserve(key, limit)
		if wait != nil {
			t.Fatalf("%s: told to wait for checks in flight, with none", key)
		}
		return slot, ok
	}
	for i := range 3 {
		if slot, ok := reserve("a", far); !ok || !slot.Equal(start) {
			t.Fatalf("attempt %d within the free failures waits until %v", i+1, slot.Sub(start))
		}
		th.failed("a")
	}
	// From here on the slots are spaced out, doubling up to the cap,
	// whether the attempts come one after the other or all at once: the
	// 4th waits 1s after the 3rd failure, then 2s, then 4s (the cap).
	var got []time.Duration
	for range 5 {
		slot, ok := reserve("a", far)
		if !ok {
			t.Fatal("refused with a distant limit")
		}
		got = append(got, slot.Sub(start))
		th.failed("a")
	}
	want := []time.Duration{1 * time.Second, 3 * time.Second, 7 * time.Second, 11 * time.Second, 15 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("slots %v, want %v", got, want)
	}
	// Another address is not held up.
	if slot, ok := reserve("b", far); !ok || !slot.Equal(start) {
		t.Error("another address waits")
	}
	// A limit closer than the next slot refuses without booking it.
	next, _ := reserve("a", far)
	if _, ok := reserve("a", start.Add(time.Second)); ok {
		t.Error("a slot beyond the limit was granted")
	}
	after, _ := reserve("a", far)
	if after.Sub(next) != 4*time.Second {
		t.Errorf("a refused attempt booked a slot: %v then %v", next.Sub(start), after.Sub(start))
	}
	// Success forgets the address.
	th.succeeded("a")
	if slot, _ := reserve("a", far); !slot.Equal(start) {
		t.Error("success did not clear the address")
	}
}

// TestThrottleBurst: attempts from a fresh address all at once get no more
// free checks than attempts one after the other. Those past the allowance
// wait for the outcome of the free ones: spaced out like any other once
// those fail, at once if one succeeds.
func TestThrottleBurst(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1e9, 0)}
	th := newThrottle(3, time.Second, 4*time.Second, time.Minute, 16, clock.now)
	far := clock.now().Add(time.Hour)
	start := clock.now()
	for i := range 3 {
		if slot, wait, ok := th.reserve("a", far); !ok || wait != nil || !slot.Equal(start) {
			t.Fatalf("free attempt %d of a burst: slot %v, wait %v, ok %v", i+1, slot.Sub(start), wait != nil, ok)
		}
	}
	_, wait, ok := th.reserve("a", far)
	if !ok || wait == nil {
		t.Fatal("a 4th attempt while 3 free ones are being checked was not told to wait for them")
	}
	th.failed("a")
	th.failed("a")
	select {
	case <-wait:
	default:
		t.Fatal("the waiting attempt was not woken by an outcome")
	}
	if _, w, _ := th.reserve("a", far); w == nil {
		t.Fatal("with one free check undecided, a 4th went ahead")
	}
	th.failed("a")
	if slot, w, ok := th.reserve("a", far); !ok || w != nil || slot.Sub(start) != time.Second {
		t.Errorf("after 3 failures of a burst: slot %v, wait %v; want a slot 1s on", slot.Sub(start), w != nil)
	}

	// The same burst from an address whose owner knows the password: the
	// first success forgets the address, and the waiting attempts go on.
	for range 3 {
		th.reserve("b", far)
	}
	_, wait, _ = th.reserve("b", far)
	th.succeeded("b")
	select {
	case <-wait:
	default:
		t.Fatal("a success did not wake the waiting attempt")
	}
	if slot, w, ok := th.reserve("b", far); !ok || w != nil || !slot.Equal(start) {
		t.Errorf("after a success: slot %v, wait %v; want at once", slot.Sub(start), w != nil)
	}

	// A check booked and never run (its client gave up) does not hold up
	// the next attempt.
	for range 3 {
		th.reserve("c", far)
	}
	_, wait, _ = th.reserve("c", far)
	th.abandoned("c")
	<-wait
	if slot, w, ok := th.reserve("c", far); !ok || w != nil || !slot.Equal(start) {
		t.Errorf("after an abandoned check: slot %v, wait %v; want at once", slot.Sub(start), w != nil)
	}
}

func TestThrottleForgets(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1e9, 0)}
	th := newThrottle(1, time.Second, time.Second, time.Minute, 16, clock.now)
	th.failed("a")
	th.failed("a")
	th.reserve("a", clock.now().Add(time.Hour))
	th.failed("a")
	if slot, _, _ := th.reserve("a", clock.now().Add(time.Hour)); !slot.After(clock.now()) {
		t.Fatal("not throttled")
	}
	th.failed("a")
	clock.add(2 * time.Minute)
	if slot, _, _ := th.reserve("a", clock.now().Add(time.Hour)); !slot.Equal(clock.now()) {
		t.Error("failures older than ForgetAfter still count")
	}
}

// TestThrottleBounded checks that the memory of failures stays bounded
// however many addresses fail, the least recent forgotten first.
func TestThrottleBounded(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1e9, 0)}
	th := newThrottle(0, time.Second, time.Second, time.Hour, 100, clock.now)
	th.failed("old")
	for i := range 10_000 {
		th.failed(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
		if n := th.len(); n > 100 {
			t.Fatalf("%d addresses remembered, cap 100", n)
		}
	}
	if _, ok := th.entries["old"]; ok {
		t.Error("the least recently seen address was kept")
	}
	if d := th.delay(1000); d != time.Second {
		t.Errorf("delay after 1000 failures %v, want the cap", d)
	}
}

func TestThrottleKey(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 5}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 5}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::1"), Port: 9}, "2001:db8:1:2::/64"},
		{&net.UnixAddr{Name: "/run/x", Net: "unix"}, "unix:/run/x"},
		{nil, ""},
	} {
		if got := throttleKey(tc.addr); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.addr, got, tc.want)
		}
	}
}
