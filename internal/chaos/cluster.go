package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/linemq/linemq/gateway/cluster/registry"
)

// readyRE matches the line linemq logs once it serves, with its MQTT and
// HTTP addresses.
var readyRE = regexp.MustCompile(`msg=ready .*mqtt=(\S+) http=(\S+)`)

// readyTimeout bounds a node's start: an embedded etcd member waits for a
// quorum before the gateway is ready.
const readyTimeout = 60 * time.Second

// configName is the configuration file every node reads, in the run's
// directory.
const configName = "linemq.yaml"

// config lets anonymous clients in from anywhere: in namespaces the
// harness is not on the nodes' loopback, where linemq admits anonymous
// clients by default (docs/security.md).
const config = "auth:\n  allow_anonymous: true\n"

// proc is one run of a linemq process.
type proc struct {
	cmd    *os.Process
	exited chan struct{}  // closed once it has exited and its output is read
	ready  chan [2]string // its MQTT and HTTP addresses, once it logged ready
}

// cluster is the three linemq processes of a run.
type cluster struct {
	bin  string
	dir  string
	topo Topology

	mu    sync.Mutex
	procs [3]*proc
	addrs [3]string // MQTT; "" while the node is not serving
	https [3]string // HTTP, likewise
	// joined: node i is a replacement, whose etcd member joined the
	// others' cluster with these flags (kept for its restarts).
	joined [3][]string
}

// args is node i's command line.
func (c *cluster) args(i int) []string {
	args := append([]string{"-config", filepath.Join(c.dir, configName), "-node-id", fmt.Sprint("n", i+1), "-data-dir", c.dataDir(i),
		"-etcd-embed"}, c.topo.Args(i)...)
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(args, c.joined[i]...) // the last of a repeated flag wins
}

// dataDir is node i's data directory.
func (c *cluster) dataDir(i int) string { return filepath.Join(c.dir, fmt.Sprint("n", i+1)) }

// replace makes node i, killed with its data directory gone, a blank
// replacement: its etcd member is swapped with linemq cluster replace,
// asked of the other nodes' members as an operator would, and it is
// started with the flags that command prints.
func (c *cluster) replace(ctx context.Context, i int) error {
	var eps []string
	for k := range 3 {
		if k != i {
			eps = append(eps, c.topo.EtcdClientURL(k))
		}
	}
	peer := argValue(c.topo.Args(i), "-etcd-peer-listen")
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(rctx, c.bin, "cluster", "replace", "-etcd-endpoints", strings.Join(eps, ","), "-peer-url", peer, fmt.Sprint("n", i+1)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("linemq cluster replace n%d: %v: %s", i+1, err, strings.TrimSpace(string(out)))
	}
	m := replacedRE.FindStringSubmatch(string(out))
	if m == nil {
		return fmt.Errorf("linemq cluster replace n%d printed no initial cluster: %q", i+1, out)
	}
	c.mu.Lock()
	c.joined[i] = []string{"-etcd-initial-cluster", m[1], "-etcd-initial-cluster-state", "existing"}
	c.mu.Unlock()
	return c.restart(ctx, i)
}

// replacedRE finds the flags linemq cluster replace says to start with.
var replacedRE = regexp.MustCompile(`-etcd-initial-cluster (\S+) -etcd-initial-cluster-state existing`)

// settled waits, at most d, until the line is at rest after a fault:
// on every serving node no fail-over is under way and every persistent
// session has its replicas in step, and, with forwards, nothing is kept
// for another node. Only from there is a fault one failure rather than
// two: a session adopted a moment ago has no replica yet, and what a node
// keeps for another that is away (or a session acknowledged while its
// replica was unreachable) is on that node's disk alone. It returns what
// was not settled yet, "" once everything was.
func (c *cluster) settled(ctx context.Context, d time.Duration, forwards bool) string {
	var why string
	waitFor(ctx, d, func() bool {
		why = ""
		for i := range 3 {
			c.mu.Lock()
			addr := c.https[i]
			c.mu.Unlock()
			if addr == "" {
				why = fmt.Sprintf("n%d is not serving", i+1)
				return false
			}
			var st struct {
				Forwards []struct {
					Node     string `json:"node"`
					Queued   int    `json:"queued"`
					OldestMs int64  `json:"oldest_ms"`
				} `json:"forwards"`
				Replicas struct {
					BelowCount  int `json:"below_count"`
					FailingOver int `json:"failing_over"`
				} `json:"replicas"`
			}
			if err := getJSON(ctx, "http://"+addr+"/api/v1/cluster", &st); err != nil {
				why = fmt.Sprintf("n%d: %v", i+1, err)
				return false
			}
			if st.Replicas.FailingOver > 0 {
				why = fmt.Sprintf("n%d: a fail-over under way", i+1)
				return false
			}
			if st.Replicas.BelowCount > 0 {
				why = fmt.Sprintf("n%d: %d session(s) below their replica count", i+1, st.Replicas.BelowCount)
				return false
			}
			for _, f := range st.Forwards {
				// Under load a few are always on their way, answered
				// within milliseconds: a backlog is what is older.
				if forwards && f.Queued > 0 && f.OldestMs >= 500 {
					why = fmt.Sprintf("n%d: %d message(s) kept for %s", i+1, f.Queued, f.Node)
					return false
				}
			}
		}
		return true
	})
	return why
}

// getJSON decodes the JSON at url into v.
func getJSON(ctx context.Context, url string, v any) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// argValue returns the value following flag in args, "" if absent.
func argValue(args []string, flag string) string {
	for k := 0; k+1 < len(args); k++ {
		if args[k] == flag {
			return args[k+1]
		}
	}
	return ""
}

// start starts node i; its log goes to <dir>/n<i>.log, appended over its
// restarts.
func (c *cluster) start(i int) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(c.dir, fmt.Sprintf("n%d.log", i+1)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "==== start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := c.topo.Command(i, c.bin, c.args(i))
	// If the harness itself dies, the node goes with it (and with that
	// its namespace can be deleted).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd.Stdout = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{cmd: cmd.Process, exited: make(chan struct{}), ready: make(chan [2]string, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		announced := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if m := readyRE.FindStringSubmatch(line); m != nil && !announced {
				announced = true
				p.ready <- [2]string{m[1], m[2]}
			}
		}
		cmd.Wait() // after the output is read, as exec requires
		fmt.Fprintf(logf, "==== exited %s: %v\n", time.Now().Format(time.RFC3339Nano), cmd.ProcessState)
		logf.Close()
		close(p.exited)
	}()
	c.mu.Lock()
	c.procs[i] = p
	c.mu.Unlock()
	return p, nil
}

// waitReady waits for p to log ready and publishes its address to the
// clients.
func (c *cluster) waitReady(ctx context.Context, i int, p *proc) error {
	select {
	case addrs := <-p.ready:
		c.mu.Lock()
		c.addrs[i], c.https[i] = addrs[0], addrs[1]
		c.mu.Unlock()
		return nil
	case <-p.exited:
		return fmt.Errorf("n%d exited before it was ready (see n%d.log in %s)", i+1, i+1, c.dir)
	case <-time.After(readyTimeout):
		return fmt.Errorf("n%d not ready within %v (see n%d.log in %s)", i+1, readyTimeout, i+1, c.dir)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startAll starts the three nodes at once (a member waits for the others'
// quorum) and waits for them.
func (c *cluster) startAll(ctx context.Context) error {
	if err := os.WriteFile(filepath.Join(c.dir, configName), []byte(config), 0o644); err != nil {
		return err
	}
	var ps [3]*proc
	for i := range 3 {
		p, err := c.start(i)
		if err != nil {
			return err
		}
		ps[i] = p
	}
	var errs []error
	for i := range 3 {
		errs = append(errs, c.waitReady(ctx, i, ps[i]))
	}
	return errors.Join(errs...)
}

func (c *cluster) mqttAddr(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrs[i]
}

func (c *cluster) proc(i int) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[i]
}

// kill SIGKILLs node i and waits for it to be gone.
func (c *cluster) kill(i int) {
	p := c.proc(i)
	c.mu.Lock()
	c.addrs[i], c.https[i] = "", ""
	c.mu.Unlock()
	p.cmd.Kill()
	<-p.exited
}

// signal sends sig to node i.
func (c *cluster) signal(i int, sig syscall.Signal) error {
	return c.proc(i).cmd.Signal(sig)
}

// restart starts node i again on its data directory and waits for it.
func (c *cluster) restart(ctx context.Context, i int) error {
	p, err := c.start(i)
	if err != nil {
		return err
	}
	return c.waitReady(ctx, i, p)
}

// leader returns the node whose etcd member leads, asking each member's
// Status until one says it is the leader (an election may be under way).
func (c *cluster) leader(ctx context.Context) (int, error) {
	cli, eps, err := c.etcd()
	if err != nil {
		return -1, err
	}
	defer cli.Close()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for i, ep := range eps {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := cli.Status(sctx, ep)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return i, nil
			}
		}
		time.Sleep(100 * time.Millisecond) // polling an election, with a deadline
	}
	return -1, errors.New("no etcd leader within 20s")
}

// etcd returns a client of the line's etcd members, and their endpoints.
func (c *cluster) etcd() (*clientv3.Client, []string, error) {
	var eps []string
	for i := range 3 {
		eps = append(eps, c.topo.EtcdClientURL(i))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	return cli, eps, err
}

// waitOwner waits, at most d, until etcd records node (0-based) as the
// owner of client's session, and reports whether it did. A node that was
// cut off past its lease has lost its records and writes them again once
// it is back: until then a client moving from it finds no session to take
// over.
func (c *cluster) waitOwner(ctx context.Context, client string, node int, d time.Duration) bool {
	cli, _, err := c.etcd()
	if err != nil {
		return false
	}
	defer cli.Close()
	key := registry.DefaultPrefix("linemq") + "sessions/" + url.PathEscape(client)
	want := fmt.Sprint("n", node+1)
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cli.Get(gctx, key)
		cancel()
		if err == nil && len(resp.Kvs) == 1 {
			var v struct {
				Node string `json:"node"`
			}
			if json.Unmarshal(resp.Kvs[0].Value, &v) == nil && v.Node == want {
				return true
			}
		}
		time.Sleep(100 * time.Millisecond) // polling the registry, with a deadline
	}
	return false
}

// stop ends every node: SIGCONT first (a frozen node cannot die of
// SIGTERM), then SIGKILL: the run is over and its state is not looked at
// again.
func (c *cluster) stop() {
	for i := range 3 {
		p := c.proc(i)
		if p == nil {
			continue
		}
		select {
		case <-p.exited:
			continue
		default:
		}
		p.cmd.Signal(syscall.SIGCONT)
		p.cmd.Kill()
		<-p.exited
	}
}
