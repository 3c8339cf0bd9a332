package gateway_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/hw"
	"github.com/linemq/linemq/hw/board"
	"github.com/linemq/linemq/hw/led"
)

// notifySocket stands in for systemd's NOTIFY_SOCKET: it collects the
// datagrams the gateway sends.
type notifySocket struct {
	conn *net.UnixConn
	msgs chan string
}

func newNotifySocket(t *testing.T) (*notifySocket, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{conn: c, msgs: make(chan string, 1024)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				close(n.msgs)
				return
			}
			for line := range strings.SplitSeq(string(buf[:k]), "\n") {
				if line != "" {
					n.msgs <- line
				}
			}
		}
	}()
	t.Cleanup(func() { c.Close() })
	return n, path
}

// await returns the first message starting with prefix, failing after timeout.
func (n *notifySocket) await(t *testing.T, prefix string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m := <-n.msgs:
			if strings.HasPrefix(m, prefix) {
				return
			}
		case <-deadline:
			t.Fatalf("no %s within %v", prefix, timeout)
		}
	}
}

// TestReadyHealthWatchdogAndLEDs: the gateway says READY=1 only once its
// MQTT listener accepts, feeds systemd's watchdog while every health check
// passes and stops within a period when one fails (the status LED then
// blinks fast and /readyz says why), and says STOPPING=1 on Close.
func TestReadyHealthWatchdogAndLEDs(t *testing.T) {
	sock, path := newNotifySocket(t)
	cfg := testConfig(t)
	cfg.HTTP.Listen = new("127.0.0.1:0")
	env := map[string]string{"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"} // a 0.4 s watchdog: fed every 0.2 s
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t), Version: "test",
		HW: hw.Options{Board: board.Simulated(""), Getenv: func(k string) string { return env[k] }}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	select {
	case <-g.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("not ready")
	}
	sock.await(t, "READY=1", 5*time.Second)
	// READY=1 came after the listener accepts: a client connects at once.
	connect(t, g.MQTTAddr(), "after-ready")
	sock.await(t, "WATCHDOG=1", 5*time.Second)

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + g.HTTPAddr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	brokertest.Eventually(t, 10*time.Second, "broker and storage checks answered, status LED heartbeat", func() bool {
		return g.Health().Overall() == health.OK && g.Hardware().Status.Pattern() == led.Heartbeat
	})
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz %d %s", code, body)
	}

	// A check that hangs (as the liveness probe does when the broker is
	// wedged) fails by its timeout; feeding stops.
	block := make(chan struct{})
	defer close(block)
	g.Health().Poll("wedge", time.Hour, 100*time.Millisecond, func(ctx context.Context) error {
		select {
		case <-block:
			return nil
		case <-ctx.Done():
			<-block
			return errors.New("unreachable")
		}
	})
	brokertest.Eventually(t, 5*time.Second, "the wedge check failed", func() bool { return g.Health().Overall() == health.Failed })
	failedAt := time.Now()
	// Drain what was sent up to one period after the failure; after that,
	// nothing may feed the watchdog.
	for len(sock.msgs) > 0 || time.Since(failedAt) < 250*time.Millisecond {
		select {
		case <-sock.msgs:
		case <-time.After(10 * time.Millisecond):
		}
	}
	quiet := time.After(time.Second)
	for done := false; !done; {
		select {
		case m := <-sock.msgs:
			if strings.HasPrefix(m, "WATCHDOG=1") {
				t.Fatalf("watchdog fed %v after the health check failed", time.Since(failedAt))
			}
		case <-quiet:
			done = true
		}
	}
	brokertest.Eventually(t, 5*time.Second, "status LED fast blink", func() bool {
		return g.Hardware().Status.Pattern() == led.FastBlink
	})
	if code, body := get("/readyz"); code == http.StatusOK || !strings.Contains(body, "wedge") {
		t.Fatalf("/readyz with a failed check: %d %s", code, body)
	}

	g.Close()
	sock.await(t, "STOPPING=1", 5*time.Second)
}
