//go:build linux

package peer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
)

// child is node "b" in a process of its own (child_test.go).
type child struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	addr  string
}

// startChild starts node b in a child process and makes it and a peers.
func startChild(t *testing.T, a *node) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, cmd: cmd, in: in, lines: make(chan string, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		in.Close() // the child exits when its stdin ends
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		cmd.Wait()
	})
	c.addr = strings.TrimPrefix(c.expect("addr "), "addr ")
	c.send("peer " + a.addr)
	a.SetPeers(map[string]string{"b": c.addr})
	waitAvailable(t, a, "b", true)
	return c
}

func (c *child) send(line string) {
	c.t.Helper()
	if _, err := fmt.Fprintln(c.in, line); err != nil {
		c.t.Fatal(err)
	}
}

// expect returns the child's next line starting with prefix; the lines
// before it go to skipped.
func (c *child) expect(prefix string, skipped ...*[]string) string {
	c.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("the child ended before %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
			if len(skipped) > 0 {
				*skipped[0] = append(*skipped[0], l)
			}
		case <-timeout:
			c.t.Fatalf("the child said no %q within 10s", prefix)
		}
	}
}

func (c *child) stats() (s PeerStats, before []string) {
	c.t.Helper()
	c.send("stats")
	l := c.expect("stats ", &before)
	if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "stats ")), &s); err != nil {
		c.t.Fatal(err)
	}
	return s, before
}

// signal sends sig and, for SIGSTOP, waits until the kernel has stopped
// every thread of the child (a signal is delivered asynchronously).
func (c *child) signal(sig syscall.Signal) {
	c.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
	if sig != syscall.SIGSTOP {
		return
	}
	brokertest.Eventually(c.t, 5*time.Second, "the child is stopped", func() bool {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", c.cmd.Process.Pid))
		if err != nil {
			c.t.Fatal(err)
		}
		for _, task := range tasks {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", c.cmd.Process.Pid, task.Name()))
			if err != nil {
				return false
			}
			// pid (comm) state ...: the state follows the last ')'.
			if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) == 0 || f[0] != "T" {
				return false
			}
		}
		return true
	})
}

// The brief's incident with a real SIGSTOP: deliveries sent to a stopped
// node time out at the sender, which re-picks; after SIGCONT the node
// reads them and must not deliver them.
func TestStoppedReceiver(t *testing.T) {
	o := fast(Options{})
	a := startNode(t, "a", o)
	b := startChild(t, a)
	to := Target{Group: "g", Filter: "t", Client: "c"}
	if err := outcome(t, deliver(a, context.Background(), "b", to, msg("t", "fresh")), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	b.expect("delivered fresh")

	b.signal(syscall.SIGSTOP)
	stopped := time.Now()
	var chs []<-chan error
	for i := range 3 {
		chs = append(chs, deliver(a, context.Background(), "b", to, msg("t", fmt.Sprint("stopped ", i))))
	}
	for i, ch := range chs {
		if err := outcome(t, ch, 5*time.Second); !errors.Is(err, ErrTimeout) {
			t.Fatalf("delivery %d to the stopped node: %v, want ErrTimeout", i, err)
		}
	}
	t.Logf("ErrTimeout for the three %v after SIGSTOP", time.Since(stopped).Round(time.Millisecond))
	time.Sleep(time.Until(stopped.Add(o.DeliverTimeout + 100*time.Millisecond)))
	b.signal(syscall.SIGCONT)

	brokertest.Eventually(t, 5*time.Second, "b's answers to the three reach a", func() bool { return stats(t, a, "b").Late == 3 })
	sb, lines := b.stats()
	for _, l := range lines {
		if strings.HasPrefix(l, "delivered stopped") {
			t.Errorf("after SIGCONT b %s: a duplicate", l)
		}
	}
	sa := stats(t, a, "b")
	t.Logf("a: timeouts %d, late %d (accepted %d, expired %d); b: expired %d", sa.Timeouts, sa.Late, sa.LateAccepted, sa.LateExpired, sb.Expired)
	if sa.LateAccepted != 0 || sa.LateExpired != 3 || sb.Expired != 3 {
		t.Fatalf("a: %+v\nb: %+v", sa, sb)
	}
}

// The other way round: a node stopped while its delivery is answered. On
// SIGCONT its deadline has long passed, but the answer is waiting in its
// socket: it must take the answer, not time the delivery out (and re-pick
// it, a duplicate), nor take its peer for hung for the pong it has not
// read yet.
func TestStoppedSender(t *testing.T) {
	a := startNode(t, "a", fast(Options{}))
	got := make(chan Reply, 1)
	a.h.deliver = func(_ string, _ Target, _ *broker.Message, r Reply) { got <- r }
	b := startChild(t, a)
	waitAvailable(t, a, "b", true)

	b.send("deliver 1")
	var r Reply
	select {
	case r = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("b's delivery did not come")
	}
	b.signal(syscall.SIGSTOP)
	r.Done(true, nil) // the answer waits in b's socket
	// b's deadline (0.4 s) and its ping's (0.25 s) pass while it is stopped.
	time.Sleep(time.Second)
	b.signal(syscall.SIGCONT)

	if l := b.expect("outcome 0"); l != "outcome 0 ok" {
		t.Fatalf("b, resumed: %q, want the accepted answer", l)
	}
	sb, _ := b.stats()
	t.Logf("b: accepted %d, timeouts %d, ping timeouts %d, stalls %d", sb.Accepted, sb.Timeouts, sb.PingTimeouts, sb.Stalls)
	// Stalls is 1 when b's clock woke before its reader had taken the
	// answer and waited for it; 0 when the reader happened to go first.
	if sb.Accepted != 1 || sb.Timeouts != 0 || sb.Late != 0 || sb.PingTimeouts != 0 {
		t.Fatalf("b's figures for a: %+v", sb)
	}
}
