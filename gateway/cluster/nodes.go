package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/linemq/linemq/gateway/cluster/registry"
)

// A line's gateways are more than the ones registered right now: a gateway
// that died is gone from the registry after its lease (10 s), and a line
// that forgot it would look healthy with one failure left. So every node
// keeps the list of the gateways that belong to the line, from three
// sources, and reports those not registered as missing until they return
// or are forgotten on purpose (ForgetNode, `linemq cluster forget`):
//
//   - every node that ever registered: each node writes line/<node> once it
//     is registered, a key bound to no lease, so it outlives the node;
//   - the embedded etcd members, by name (a member is a gateway);
//   - cluster.expected_nodes from the configuration.

// dirLine holds the line's gateways, one key each, bound to no lease.
const dirLine = "line/"

// NodeStatus is one gateway of the line as this node sees it.
type NodeStatus struct {
	Name string `json:"name"`
	// Missing: it belongs to the line but is not registered now.
	Missing bool `json:"missing"`
	// Since is when it was last registered (or, never seen registered
	// by this node, when this node learnt that it belongs to the line):
	// for a missing node, missing since then.
	Since time.Time `json:"since"`
	// From says how this node knows the gateway belongs to the line:
	// "registered", "etcd member", "expected" (the configuration).
	From string `json:"from"`
}

// lineNodes is the line's gateways and whether each is registered now.
type lineNodes struct {
	self string

	mu       sync.Mutex
	known    map[string]*NodeStatus
	expected []string
}

func newLineNodes(self string, expected []string) *lineNodes {
	l := &lineNodes{self: self, known: map[string]*NodeStatus{}, expected: expected}
	now := time.Now()
	for _, n := range expected {
		l.known[n] = &NodeStatus{Name: n, Missing: n != self, Since: now, From: "expected"}
	}
	return l
}

// update takes the registry's current nodes: a node registered is no
// longer missing; one that was and is not any more is missing from now.
func (l *lineNodes) update(registered []registry.Node) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, n := range registered {
		seen[n.Name] = true
		k := l.known[n.Name]
		if k == nil {
			k = &NodeStatus{Name: n.Name, From: "registered"}
			l.known[n.Name] = k
		}
		k.Missing, k.Since = false, now
	}
	for name, k := range l.known {
		if !seen[name] && !k.Missing && name != l.self {
			k.Missing, k.Since = true, now
		}
	}
}

// add records gateways that belong to the line by another source (the
// line/ keys, the etcd member list), missing from now if not registered.
func (l *lineNodes) add(names []string, from string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range names {
		if n == "" || l.known[n] != nil {
			continue
		}
		l.known[n] = &NodeStatus{Name: n, Missing: n != l.self, Since: now, From: from}
	}
}

// forget drops a gateway removed from the line on purpose, unless the
// configuration still expects it.
func (l *lineNodes) forget(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.expected, name) {
		delete(l.known, name)
	}
}

// prune forgets the missing gateways that no source names any more: their
// line/ entry was deleted (ForgetNode) and, with embedded etcd, their
// member removed; those the configuration expects stay.
func (l *lineNodes) prune(line, members []string, embedded bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, k := range l.known {
		if !k.Missing || slices.Contains(l.expected, name) || slices.Contains(line, name) ||
			(embedded && slices.Contains(members, name)) {
			continue
		}
		delete(l.known, name)
	}
}

// list returns the line's gateways by name.
func (l *lineNodes) list() []NodeStatus {
	l.mu.Lock()
	out := make([]NodeStatus, 0, len(l.known))
	for _, k := range l.known {
		out = append(out, *k)
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// lineKey is the key of node's line/ entry under prefix.
func lineKey(prefix, node string) string { return prefix + dirLine + node }

// markInLine writes this node's line/ entry, bound to no lease.
func markInLine(ctx context.Context, cli *clientv3.Client, prefix, node string) error {
	_, err := cli.Put(ctx, lineKey(prefix, node), "")
	return err
}

// readLine returns the nodes with a line/ entry.
func readLine(ctx context.Context, cli *clientv3.Client, prefix string) ([]string, error) {
	resp, err := cli.Get(ctx, prefix+dirLine, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, strings.TrimPrefix(string(kv.Key), prefix+dirLine))
	}
	return out, nil
}

// ForgetNode removes a gateway from the line on purpose (it was taken out
// of service or replaced under another name), so that no node reports it
// missing any more: its line/ entry is deleted, through a client of its
// own to endpoints. With embedded etcd, remove its member too (etcdctl
// member remove), or it is listed again from the member list. cluster is
// the cluster's name ("" for the default). It reports whether the node was
// in the line.
func ForgetNode(ctx context.Context, endpoints []string, cluster, node string) (bool, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Context: ctx})
	if err != nil {
		return false, err
	}
	defer cli.Close()
	resp, err := cli.Delete(ctx, lineKey(registry.DefaultPrefix(orDefault(cluster)), node))
	if err != nil {
		return false, err
	}
	return resp.Deleted > 0, nil
}

func orDefault(cluster string) string {
	if cluster == "" {
		return registry.DefaultCluster
	}
	return cluster
}

// ReplaceMember makes room in an embedded etcd cluster for a gateway that
// replaces one whose SD card died, under the same name: it removes the
// member called name (if the cluster still lists it) and adds a member
// at peerURL in its place, through a running member's client endpoints.
// It returns the initial cluster (name=peer-url,...) the replacement is to
// start with, with initial cluster state "existing" and an empty data
// directory.
func ReplaceMember(ctx context.Context, endpoints []string, name, peerURL string) (string, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Context: ctx})
	if err != nil {
		return "", err
	}
	defer cli.Close()
	list, err := cli.MemberList(ctx)
	if err != nil {
		return "", fmt.Errorf("listing the etcd members: %w", err)
	}
	for _, m := range list.Members {
		if m.Name == name || slices.Contains(m.PeerURLs, peerURL) {
			if err := whileUnhealthy(ctx, func() error { _, err := cli.MemberRemove(ctx, m.ID); return err }); err != nil {
				return "", fmt.Errorf("removing the member %q: %w", m.Name, err)
			}
		}
	}
	var added *clientv3.MemberAddResponse
	err = whileUnhealthy(ctx, func() (err error) { added, err = cli.MemberAdd(ctx, []string{peerURL}); return err })
	if err != nil {
		return "", fmt.Errorf("adding a member at %s: %w", peerURL, err)
	}
	var parts []string
	for _, m := range added.Members {
		mname := m.Name
		if m.ID == added.Member.ID {
			mname = name // not started yet: it has no name of its own
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, mname+"="+u)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ","), nil
}

// whileUnhealthy calls f again while etcd refuses a membership change as
// "unhealthy cluster", until ctx ends. etcd refuses one for a few seconds
// after any member (re)started, until every member has been connected for
// 5 s; a replacement made right after another gateway's restart met that
// (fault suite, seed 40) and failed, though waiting is all it needed.
func whileUnhealthy(ctx context.Context, f func() error) error {
	for {
		err := f()
		if !errors.Is(err, rpctypes.ErrUnhealthy) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (etcd refuses membership changes until every member has been up 5 s)", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
