// Package etcdtest runs real etcd members for the cluster packages' tests:
// one embedded member on 127.0.0.1 with ports the kernel chooses, data in a
// temporary directory, a key prefix per test, and TCP proxies in front of
// it that a test can cut to simulate a partition or an etcd outage.
//
// A test package shares one member across its tests (start it in TestMain
// with [New]) and gives every test its own [Prefix]; a test that stops or
// restarts etcd starts its own with [Start].
//
// Every client made here connects through its own [Proxy]: cutting the
// proxy drops the client's connections without touching etcd (a
// partition), and [Etcd.Stop] cuts them all before stopping the member, so
// the member does not wait for the clients' open watch streams to finish.
package etcdtest

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/linemq/linemq/gateway/cluster/etcdembed"
)

// StartTimeout bounds how long a member may take to become ready.
const StartTimeout = 30 * time.Second

// Heartbeat and ElectionTimeout are short so leases can be short too (etcd
// refuses a TTL under 1.5 election timeouts).
const (
	Heartbeat       = 50 * time.Millisecond
	ElectionTimeout = 500 * time.Millisecond
)

// Etcd is one embedded member with the proxies of the clients made from it.
type Etcd struct {
	opts etcdembed.Options

	mu      sync.Mutex
	member  *etcdembed.Member // nil while stopped
	target  string            // host:port of the member's client listener
	proxies []*Proxy
}

// Options change how a test member runs; the zero value suits most tests.
type Options struct {
	// Fsync makes the member sync its WAL as a real one does. Off by
	// default: tests start many short-lived members on a shared machine
	// and only a latency measurement needs real syncs.
	Fsync bool
}

// New starts a member with its data in dir and waits until it serves.
// Close it when done. Use it from TestMain; tests use Start.
func New(dir string, o Options) (*Etcd, error) {
	e := &Etcd{opts: etcdembed.Options{
		Name:            "test",
		Dir:             dir,
		PeerListen:      "http://127.0.0.1:0",
		ClientListen:    "http://127.0.0.1:0",
		Heartbeat:       Heartbeat,
		ElectionTimeout: ElectionTimeout,
		UnsafeNoFsync:   !o.Fsync,
		Logger:          logger(),
	}}
	if err := e.start(); err != nil {
		return nil, err
	}
	// Later starts reuse the ports the kernel chose, so clients (through
	// their proxies) and the member's stored peer URL stay valid.
	m := e.member
	e.opts.PeerListen = m.PeerURLs()[0]
	e.opts.AdvertisePeer = "http://127.0.0.1:0" // as first recorded in the member's data
	e.opts.ClientListen = m.ClientURLs()[0]
	return e, nil
}

// Start starts a member for one test, in t.TempDir(), and closes it when
// the test ends.
func Start(t testing.TB, o Options) *Etcd {
	t.Helper()
	e, err := New(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func (e *Etcd) start() error {
	m, err := etcdembed.Start(e.opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		m.Close()
		return err
	}
	u, err := url.Parse(m.ClientURLs()[0])
	if err != nil {
		m.Close()
		return err
	}
	e.mu.Lock()
	e.member, e.target = m, u.Host
	e.mu.Unlock()
	return nil
}

// Endpoint returns the member's own client URL, bypassing every proxy.
func (e *Etcd) Endpoint() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return "http://" + e.target
}

// Client returns a client that talks to the member directly (no proxy,
// so Stop does not reach it quickly: use it for setting up and checking
// while etcd runs). It is closed when the test ends.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return client(t, e.Endpoint())
}

// ProxiedClient returns a client behind a proxy of its own, and the proxy.
// Both are closed when the test ends.
func (e *Etcd) ProxiedClient(t testing.TB) (*clientv3.Client, *Proxy) {
	t.Helper()
	p, err := NewProxy(e.target)
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.proxies = append(e.proxies, p)
	e.mu.Unlock()
	c := client(t, p.Endpoint())
	t.Cleanup(func() {
		c.Close()
		p.Close()
	})
	return c, p
}

func client(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Stop stops the member as a crash would look to its clients: every
// proxied connection is cut first, then the member shuts down.
func (e *Etcd) Stop(t testing.TB) {
	t.Helper()
	e.mu.Lock()
	m := e.member
	e.member = nil
	for _, p := range e.proxies {
		p.setDown(true)
	}
	e.mu.Unlock()
	if m == nil {
		t.Fatal("etcdtest: Stop: the member is not running")
	}
	m.Close()
}

// Restart starts the stopped member again on the same ports and data, and
// lets proxied clients through again.
func (e *Etcd) Restart(t testing.TB) {
	t.Helper()
	if err := e.start(); err != nil {
		t.Fatalf("etcdtest: restart: %v", err)
	}
	e.mu.Lock()
	for _, p := range e.proxies {
		p.setDown(false)
	}
	e.mu.Unlock()
}

// Close stops the member, if running, and every proxy.
func (e *Etcd) Close() {
	e.mu.Lock()
	m, ps := e.member, e.proxies
	e.member, e.proxies = nil, nil
	e.mu.Unlock()
	for _, p := range ps {
		p.Close()
	}
	if m != nil {
		m.Close()
	}
}

// Prefix returns a registry key prefix of the test's own, so tests sharing
// one member never see each other's keys.
func Prefix(t testing.TB) string {
	return "/linemq-test/" + url.PathEscape(t.Name()) + "/"
}

// logger shows etcd's warnings when ETCDTEST_LOG is set, and nothing
// otherwise: a healthy member is chatty.
func logger() *slog.Logger {
	if os.Getenv("ETCDTEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// String describes the member for failure messages.
func (e *Etcd) String() string {
	return fmt.Sprintf("etcd %s at %s", e.opts.Name, strings.TrimPrefix(e.Endpoint(), "http://"))
}

// Main runs a test package's tests and then fails the package if
// goroutines outlive them. Run it from TestMain after setting up shared
// fixtures, and tear them down in teardown (nil for none) before the
// check.
//
// The check waits up to LeakTimeout for goroutines to end: a stopped etcd
// member's peer connections wind down on etcd's own read timeouts (a few
// seconds), which is not a leak.
func Main(m *testing.M, teardown func()) {
	code := m.Run()
	if teardown != nil {
		teardown()
	}
	if code == 0 {
		if err := waitGoroutines(LeakTimeout); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// LeakTimeout bounds how long Main waits for goroutines to end.
const LeakTimeout = 15 * time.Second

func waitGoroutines(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// MainShared is Main for a package whose tests share one etcd member (each
// under its own Prefix): it starts the member in a temporary directory,
// hands it to set before any test runs, and removes it afterwards.
func MainShared(m *testing.M, set func(*Etcd)) {
	dir, err := os.MkdirTemp("", "etcdtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	e, err := New(dir, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	set(e)
	Main(m, func() {
		e.Close()
		os.RemoveAll(dir)
	})
}
