package etcdembed_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/linemq/linemq/gateway/cluster/etcdembed"
	"github.com/linemq/linemq/gateway/cluster/internal/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.Main(m, nil)
}

func TestRestartKeepsData(t *testing.T) {
	e := etcdtest.Start(t, etcdtest.Options{})
	c, _ := e.ProxiedClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	e.Stop(t)
	e.Restart(t)
	r, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("after restart got %v, want k=v", r.Kvs)
	}
}

// TestThreeMembers runs the deployment the package is for: three members,
// each as a gateway would start it, that keep serving when one stops.
func TestThreeMembers(t *testing.T) {
	members := startCluster(t, 3)
	clients := make([]*clientv3.Client, len(members))
	for i, m := range members {
		c, err := clientv3.New(clientv3.Config{Endpoints: m.ClientURLs(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
		defer c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := clients[0].Put(ctx, "line", "1"); err != nil {
		t.Fatal(err)
	}
	if r, err := clients[2].Get(ctx, "line"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("member 3 reads %v, %v; want the value written through member 1", r, err)
	}

	// Stop the leader: the other two hold a quorum and elect a new one.
	leader := -1
	for i, m := range members {
		if m.IsLeader() {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no member is leader")
	}
	clients[leader].Close()
	members[leader].Close()
	other := (leader + 1) % 3
	if _, err := clients[other].Put(ctx, "line", "2"); err != nil {
		t.Fatalf("write after the leader stopped: %v", err)
	}
	r, err := clients[(leader+2)%3].Get(ctx, "line")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "2" {
		t.Fatalf("read after the leader stopped: %v, %v", r, err)
	}
}

// startCluster starts n members on loopback ports picked up front (every
// member must know every peer URL before it starts). A port taken between
// picking and binding fails the start, which is retried with new ports.
func startCluster(t *testing.T, n int) []*etcdembed.Member {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ms, err := tryCluster(t, n, attempt)
		if err == nil {
			return ms
		}
		lastErr = err
	}
	t.Fatal(lastErr)
	return nil
}

func tryCluster(t *testing.T, n, attempt int) ([]*etcdembed.Member, error) {
	ports := freePorts(t, 2*n)
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i]))
	}
	var members []*etcdembed.Member
	closeAll := func() {
		for _, m := range members {
			m.Close()
		}
	}
	for i := range n {
		m, err := etcdembed.Start(etcdembed.Options{
			Name:            fmt.Sprintf("m%d", i),
			Dir:             filepath.Join(t.TempDir(), fmt.Sprint(attempt)),
			PeerListen:      fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			ClientListen:    fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			InitialCluster:  strings.Join(initial, ","),
			ClusterToken:    t.Name(),
			Heartbeat:       etcdtest.Heartbeat,
			ElectionTimeout: etcdtest.ElectionTimeout,
			UnsafeNoFsync:   true,
		})
		if err != nil {
			closeAll()
			return nil, err
		}
		members = append(members, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), etcdtest.StartTimeout)
	defer cancel()
	for _, m := range members {
		if err := m.WaitReady(ctx); err != nil {
			closeAll()
			return nil, err
		}
	}
	t.Cleanup(closeAll)
	return members, nil
}

// freePorts asks the kernel for n distinct free ports, holding them all
// open at once so none repeats, then frees them for the members to bind.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}
