package watchdog

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// notifySocket listens where NOTIFY_SOCKET would point and returns its
// path and a function returning every datagram received so far.
func notifySocket(t *testing.T) (string, func() []string) {
	t.Helper()
	// t.TempDir's path can exceed the 108 bytes a socket path may have.
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return path, func() []string {
		// A unix datagram is in the receiver's queue when the sender's
		// write returns, so a short deadline only ends the read once the
		// queue is empty.
		var msgs []string
		buf := make([]byte, 4096)
		for {
			c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			n, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return msgs
				}
				t.Fatalf("read notify socket: %v", err)
			}
			msgs = append(msgs, string(buf[:n]))
		}
	}
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestNotifierProtocol(t *testing.T) {
	path, recv := notifySocket(t)
	n, err := NotifierFromEnv(env(map[string]string{
		"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000", "WATCHDOG_PID": strconv.Itoa(os.Getpid()),
	}), os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if n.Timeout() != 4*time.Second {
		t.Errorf("Timeout() = %v, want WATCHDOG_USEC", n.Timeout())
	}

	g := newGate()
	s, clk := start(t, g, n)
	if clk.Period() != 2*time.Second {
		t.Errorf("period %v, want half of WATCHDOG_USEC", clk.Period())
	}
	clk.Advance(2 * time.Second)
	clk.Advance(2 * time.Second) // the first tick's check is done
	got := recv()
	if want := []string{"WATCHDOG=1", "STATUS=Healthy; feeding the watchdog", "WATCHDOG=1"}; !hasPrefix(got, want) {
		t.Fatalf("before Ready: %q, want %q then more WATCHDOG=1", got, want)
	}
	for _, m := range got {
		if m == "READY=1" {
			t.Fatal("READY=1 sent before Ready was called")
		}
	}

	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err != nil { // again: nothing more is sent
		t.Fatal(err)
	}
	got = recv()
	if !contains(got, "READY=1") || count(got, "READY=1") != 1 {
		t.Errorf("after Ready: %q, want one READY=1", got)
	}

	g.set(false, "mqtt-listener: accept: too many open files")
	clk.Advance(2 * time.Second)
	clk.Advance(2 * time.Second) // the check that saw the failure is done
	recv()
	for range 3 {
		clk.Advance(2 * time.Second)
	}
	if got := recv(); len(got) != 0 {
		t.Errorf("sent %q while the gate failed, want nothing", got)
	}
	if st := s.State(); st.Feeding || !st.Ready {
		t.Errorf("State = %+v", st)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := recv(); len(got) != 1 || got[0] != "STOPPING=1" {
		t.Errorf("on Close: %q, want STOPPING=1", got)
	}
}

// TestNotifierRestarting: a supervisor closed for a restart into a new
// version tells systemd RELOADING=1 with the monotonic clock, not
// STOPPING=1.
func TestNotifierRestarting(t *testing.T) {
	path, recv := notifySocket(t)
	n, err := NewNotifier(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := start(t, newGate(), n)
	recv()
	s.Restarting()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got := recv()
	if len(got) != 1 || !strings.HasPrefix(got[0], "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("on Close after Restarting: %q, want RELOADING=1 and MONOTONIC_USEC", got)
	}
	usec, err := strconv.ParseInt(strings.TrimPrefix(got[0], "RELOADING=1\nMONOTONIC_USEC="), 10, 64)
	if err != nil || usec <= 0 {
		t.Errorf("MONOTONIC_USEC %q: %v", got[0], err)
	}
}

func TestNotifierStatusOnFailure(t *testing.T) {
	path, recv := notifySocket(t)
	n, err := NewNotifier(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	g.set(false, "storage:\ncommit failed")
	start(t, g, n)
	got := recv()
	if len(got) != 1 || got[0] != "STATUS=Not feeding the watchdog: storage: commit failed" {
		t.Errorf("got %q", got)
	}
}

func TestNotifierNoWatchdog(t *testing.T) {
	path, recv := notifySocket(t)
	n, err := NewNotifier(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Without WATCHDOG_USEC systemd does not watch: feeding sends nothing.
	if err := n.Feed(); err != nil {
		t.Fatal(err)
	}
	if err := n.SetStatus("two\nlines"); err == nil {
		t.Error("SetStatus accepted a newline")
	}
	if got := recv(); len(got) != 0 {
		t.Errorf("got %q, want nothing", got)
	}
}

func TestNotifierAbstractSocket(t *testing.T) {
	name := "@linemq-test-" + strconv.Itoa(os.Getpid())
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Skipf("no abstract sockets: %v", err)
	}
	defer c.Close()
	n, err := NewNotifier(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Ready(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	k, err := c.Read(buf)
	if err != nil || string(buf[:k]) != "READY=1" {
		t.Errorf("read %q, %v", buf[:k], err)
	}
}

func TestNotifierFromEnv(t *testing.T) {
	pid := 4242
	tests := []struct {
		env      map[string]string
		nilN     bool
		watchdog time.Duration
		err      string
	}{
		{env: map[string]string{}, nilN: true},
		{env: map[string]string{"NOTIFY_SOCKET": "/run/systemd/notify"}},
		{env: map[string]string{"NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "30000000"}, watchdog: 30 * time.Second},
		{env: map[string]string{"NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}, watchdog: 30 * time.Second},
		// The variables were meant for another process.
		{env: map[string]string{"NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}},
		{env: map[string]string{"NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "soon"}, err: "WATCHDOG_USEC"},
		{env: map[string]string{"NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "0"}, err: "WATCHDOG_USEC"},
		{env: map[string]string{"NOTIFY_SOCKET": "vsock:2:1234"}, err: "not a unix socket"},
	}
	for _, tt := range tests {
		n, err := NotifierFromEnv(env(tt.env), pid)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%v: error %v, want %q", tt.env, err, tt.err)
			}
		case err != nil:
			t.Errorf("%v: %v", tt.env, err)
		case tt.nilN:
			if n != nil {
				t.Errorf("%v: got a Notifier, want none", tt.env)
			}
		case n.Timeout() != tt.watchdog:
			t.Errorf("%v: Timeout() = %v, want %v", tt.env, n.Timeout(), tt.watchdog)
		}
	}
}

func hasPrefix(got, want []string) bool {
	return len(got) >= len(want) && strings.Join(got[:len(want)], "|") == strings.Join(want, "|")
}

func contains(msgs []string, m string) bool { return count(msgs, m) > 0 }

func count(msgs []string, m string) int {
	n := 0
	for _, x := range msgs {
		if x == m {
			n++
		}
	}
	return n
}
