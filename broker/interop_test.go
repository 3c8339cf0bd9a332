package broker_test

// Interoperability with the Mosquitto command line clients: a third-party
// MQTT 3.1.1 and 5.0 implementation driving the broker over TCP, with its
// output compared byte for byte.
//
// Helpers here are prefixed "interop" so they do not collide with other test
// files of package broker_test.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
)

// interopProcTimeout bounds every mosquitto process.
const interopProcTimeout = 20 * time.Second

// interopBuffer is a bytes.Buffer safe to read while a process writes it.
type interopBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *interopBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *interopBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// interopProc is a running mosquitto_sub.
type interopProc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr interopBuffer
	exited         chan struct{} // closed when the process has exited
	err            error         // its exit status, once exited is closed
}

// interopStart starts bin with args under a timeout; the process is killed
// when the test ends if it is still running.
func interopStart(t *testing.T, name, bin string, args ...string) *interopProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), interopProcTimeout)
	p := &interopProc{name: name, cmd: exec.CommandContext(ctx, bin, args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("%s: start %s: %v", name, bin, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
		cancel()
	}()
	t.Cleanup(func() {
		cancel() // kills this process only, if it is still running
		<-p.exited
	})
	return p
}

// wait waits for the process to exit by itself and fails unless it exits 0.
func (p *interopProc) wait(t *testing.T) string {
	t.Helper()
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("%s exited with %v\nstdout:\n%s\nstderr:\n%s", p.name, p.err, p.stdout.String(), p.stderr.String())
		}
	case <-time.After(interopProcTimeout + 5*time.Second):
		t.Fatalf("%s did not exit\nstdout:\n%s\nstderr:\n%s", p.name, p.stdout.String(), p.stderr.String())
	}
	return p.stdout.String()
}

// interopRun runs bin with args to completion under a timeout, failing the
// test unless it exits 0.
func interopRun(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), interopProcTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// interopLines splits mosquitto_sub output into lines.
func interopLines(out string) []string {
	if out == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
}

func TestInteropMosquittoClients(t *testing.T) {
	subBin, err := exec.LookPath("mosquitto_sub")
	if err != nil {
		t.Skipf("mosquitto_sub is not on PATH (%v): install the Mosquitto clients (Debian: mosquitto-clients) to run this test", err)
	}
	pubBin, err := exec.LookPath("mosquitto_pub")
	if err != nil {
		t.Skipf("mosquitto_pub is not on PATH (%v): install the Mosquitto clients (Debian: mosquitto-clients) to run this test", err)
	}
	help, _ := exec.Command(subBin, "--help").CombinedOutput() // exits non-zero by design
	if l := bytes.SplitN(help, []byte("\n"), 3); len(l) > 1 {
		t.Logf("%s", l[1])
	}

	// Which spellings of -V the installed clients accept: those --help
	// names, and the bare numbers that Mosquitto 2 also takes. Each is
	// tried against the broker: with -E mosquitto_sub exits 0 once its
	// subscription is acknowledged, and fails on a spelling it does not
	// know.
	_, probeAddr := brokertest.RunServer(t, broker.Options{})
	probeHost, probePort, _ := net.SplitHostPort(probeAddr)
	type spelling struct{ flag, family string }
	var spellings []spelling
	for _, s := range []spelling{{"5", "5"}, {"mqttv5", "5"}, {"311", "311"}, {"mqttv311", "311"}} {
		ctx, cancel := context.WithTimeout(context.Background(), interopProcTimeout)
		out, err := exec.CommandContext(ctx, subBin, "-h", probeHost, "-p", probePort, "-V", s.flag, "-t", "probe", "-E").CombinedOutput()
		cancel()
		if err != nil {
			t.Logf("-V %s not usable: %v %s", s.flag, err, bytes.TrimSpace(out))
			continue
		}
		spellings = append(spellings, s)
	}
	if !slices.ContainsFunc(spellings, func(s spelling) bool { return s.family == "5" }) ||
		!slices.ContainsFunc(spellings, func(s spelling) bool { return s.family == "311" }) {
		t.Fatalf("no usable -V spelling for both MQTT 5 and 3.1.1: %v\n%s", spellings, help)
	}

	for _, sp := range spellings {
		t.Run("V="+sp.flag, func(t *testing.T) {
			srv, addr := brokertest.RunServer(t, broker.Options{})
			host, port, _ := net.SplitHostPort(addr)
			conn := []string{"-h", host, "-p", port, "-V", sp.flag}
			pub := func(args ...string) { t.Helper(); interopRun(t, pubBin, append(slices.Clone(conn), args...)...) }

			// A retained message published before anyone subscribes.
			pub("-q", "1", "-r", "-t", "plant/r/temp", "-m", "19.5", "-i", "interop-pub-r")
			brokertest.Eventually(t, 5*time.Second, "the retained message to be stored", func() bool {
				return srv.Stats().Retained == 1
			})

			sub := interopStart(t, "mosquitto_sub", subBin, append(slices.Clone(conn),
				"-i", "interop-sub", "-q", "1", "-t", "plant/+/temp", "-C", "4", "-v")...)
			brokertest.Eventually(t, 10*time.Second, "mosquitto_sub's subscription", func() bool {
				return srv.Stats().Subscriptions == 1
			})
			for i, m := range []string{"21.5", "22", "23"} {
				pub("-q", "1", "-t", fmt.Sprintf("plant/%c/temp", 'a'+i), "-m", m, "-i", fmt.Sprintf("interop-pub-%d", i))
			}
			want := "plant/r/temp 19.5\nplant/a/temp 21.5\nplant/b/temp 22\nplant/c/temp 23\n"
			if got := sub.wait(t); got != want {
				t.Errorf("mosquitto_sub output:\n%q\nwant:\n%q", got, want)
			}

			// Late subscribers see the retained flag [MQTT-3.3.1-6], at the
			// lower of the stored and granted QoS.
			for _, q := range []string{"0", "1"} {
				late := interopStart(t, "mosquitto_sub -F (late)", subBin, append(slices.Clone(conn),
					"-i", "interop-sub-late"+q, "-q", q, "-t", "plant/r/temp", "-C", "1", "-F", "%r %q %t %p")...)
				if got, want := late.wait(t), "1 "+q+" plant/r/temp 19.5\n"; got != want {
					t.Errorf("late mosquitto_sub -q %s -F '%%r %%q %%t %%p' output %q, want %q", q, got, want)
				}
			}

			// An empty retained message clears the topic.
			pub("-q", "1", "-r", "-t", "plant/r/temp", "-n", "-i", "interop-pub-clear")
			brokertest.Eventually(t, 5*time.Second, "the retained message to be cleared", func() bool {
				return srv.Stats().Retained == 0
			})

			// Each subscriber above has gone (mosquitto_sub -C disconnects
			// after its last message); start the next ones from zero so
			// that the counts below are theirs.
			brokertest.Eventually(t, 10*time.Second, "the earlier subscribers to be gone", func() bool {
				return srv.Stats().Subscriptions == 0
			})

			if sp.family == "5" {
				// User properties travel from publisher to subscriber.
				sub := interopStart(t, "mosquitto_sub -F", subBin, append(slices.Clone(conn),
					"-i", "interop-sub-props", "-t", "plant/u/temp", "-C", "1", "-F", "%t %p %P")...)
				brokertest.Eventually(t, 10*time.Second, "mosquitto_sub's subscription", func() bool {
					return srv.Stats().Subscriptions == 1
				})
				pub("-q", "1", "-t", "plant/u/temp", "-m", "20", "-i", "interop-pub-props",
					"-D", "publish", "user-property", "k", "v", "-D", "publish", "user-property", "site", "north")
				if got, want := sub.wait(t), "plant/u/temp 20 k:v site:north\n"; got != want {
					t.Errorf("mosquitto_sub -F '%%t %%p %%P' output %q, want %q", got, want)
				}
				brokertest.Eventually(t, 10*time.Second, "the subscriber to be gone", func() bool {
					return srv.Stats().Subscriptions == 0
				})
			}

			// A shared subscription: two members, four messages, two each.
			// Stats count share groups, not their members; so each member
			// also subscribes, after the shared filter, to an ordinary
			// filter of its own that nothing is published to: once both
			// of those are counted, both members have joined.
			var members [2]*interopProc
			for i := range members {
				members[i] = interopStart(t, fmt.Sprintf("mosquitto_sub $share member %d", i), subBin, append(slices.Clone(conn),
					"-i", fmt.Sprintf("interop-share-%d", i), "-t", "$share/g/plant/#", "-t", fmt.Sprintf("interop/ready/%d", i), "-C", "2", "-v")...)
			}
			brokertest.Eventually(t, 10*time.Second, "both share group members to subscribe", func() bool {
				return srv.Stats().Subscriptions == 2
			})
			if st := srv.Stats(); st.ShareGroups != 1 {
				t.Fatalf("ShareGroups %d, want 1", st.ShareGroups)
			}
			for i := 1; i <= 4; i++ {
				pub("-q", "1", "-t", fmt.Sprintf("plant/s%d/temp", i), "-m", fmt.Sprint(i), "-i", fmt.Sprintf("interop-share-pub-%d", i))
			}
			var got [2][]string
			for i, m := range members {
				got[i] = interopLines(m.wait(t))
			}
			all := append(slices.Clone(got[0]), got[1]...)
			slices.Sort(all)
			wantAll := []string{"plant/s1/temp 1", "plant/s2/temp 2", "plant/s3/temp 3", "plant/s4/temp 4"}
			if len(got[0]) != 2 || len(got[1]) != 2 || !slices.Equal(all, wantAll) {
				t.Fatalf("share group members got %q and %q, want two each of %q", got[0], got[1], wantAll)
			}
			// Round robin (the default strategy) alternates members.
			odd := []string{"plant/s1/temp 1", "plant/s3/temp 3"}
			even := []string{"plant/s2/temp 2", "plant/s4/temp 4"}
			if !(slices.Equal(got[0], odd) && slices.Equal(got[1], even)) && !(slices.Equal(got[0], even) && slices.Equal(got[1], odd)) {
				t.Errorf("share group members got %q and %q, want alternating messages (round robin)", got[0], got[1])
			}
			brokertest.Eventually(t, 10*time.Second, "every mosquitto client gone", func() bool {
				st := srv.Stats()
				return st.ClientsConnected == 0 && st.Sessions == 0 && st.ShareGroups == 0
			})
		})
	}
}
