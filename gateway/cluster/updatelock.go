package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/linemq/linemq/gateway/cluster/registry"
	"github.com/linemq/linemq/gateway/peer"
)

// A line is updated one gateway at a time, and only while it is whole.
// A gateway about to restart into a new version takes the line's update
// lock, a key in etcd, once every gateway of the line is registered and
// reachable and etcd has a member to spare beyond its quorum (the
// gateway's own member goes down with it). It holds the lock through its
// restart and its trial, and lets go once the new version is committed,
// or once the version before is back after a rollback: then it also
// leaves a halt mark naming the version, so that the line's other
// gateways, waiting with the same version installed, give it up instead
// of trying it in turn.
//
// The lock's lease outlives the restart (the new program finds the key
// naming its node and keeps the same lease alive), not a gateway that
// died while updating: that one's lease ends after UpdateLockTTL, but the
// line is not whole without it, so nobody else starts meanwhile.

// The update keys, under the cluster's prefix.
const (
	keyUpdateLock = "update/lock"
	keyUpdateHalt = "update/halted"
)

// UpdateLockTTL is the lease of the update lock: longer than a gateway
// takes to stop and start again into its new version.
const UpdateLockTTL = 60 * time.Second

// updatePoll is how often a gateway waiting for the lock looks again.
const updatePoll = time.Second

// UpdateHolder is the gateway holding the line's update lock.
type UpdateHolder struct {
	Node    string    `json:"node"`
	Version string    `json:"version"` // the version it is updating to
	Since   time.Time `json:"since"`
	Lease   int64     `json:"lease"`
}

// UpdateHalt is the mark a gateway whose update was rolled back leaves.
type UpdateHalt struct {
	Node    string    `json:"node"`
	Version string    `json:"version"`
	At      time.Time `json:"at"`
	Reason  string    `json:"reason"`
}

// LineUpdate is the line's update as the status page shows it.
type LineUpdate struct {
	// Holder is the gateway updating now, nil when none is.
	Holder *UpdateHolder `json:"holder"`
	// Halted is the last update rolled back, which the other gateways
	// gave up; nil when none was.
	Halted *UpdateHalt `json:"halted"`
	// Waiting is why this gateway, with an update to start, waits.
	Waiting string `json:"waiting,omitempty"`
}

// ErrUpdateHalted is AcquireUpdate's answer when the version was rolled
// back on another gateway of the line.
var ErrUpdateHalted = errors.New("the line's update of this version was halted")

// updateLock is this gateway's side of the lock.
type updateLock struct {
	mu     sync.Mutex
	cancel context.CancelFunc // ends the keep-alive of the lock's lease
	wait   string             // why the line cannot be updated now, while waiting
}

// keyPrefix is where the cluster's keys live in etcd.
func (c *Cluster) keyPrefix() string {
	return cmp.Or(c.opts.Etcd.Prefix, registry.DefaultPrefix(cmp.Or(c.opts.Name, registry.DefaultCluster)))
}

// Whole reports whether the line may lose a gateway for an update: nil, or
// why not. Whole is: the registry in step with etcd, every gateway of the
// line registered, each reachable over the mesh, and, when this gateway
// hosts an etcd member, at least one member more than etcd's quorum up.
func (c *Cluster) Whole() error {
	if st, why := c.node.reg.State(); st != registry.Healthy {
		if why == nil {
			return fmt.Errorf("registry %v", st)
		}
		return fmt.Errorf("registry %v: %v", st, why)
	}
	var missing []string
	for _, n := range c.Missing() {
		missing = append(missing, n.Name)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s not registered", strings.Join(missing, ", "))
	}
	peers := c.mesh.Stats()
	for _, n := range c.node.reg.Nodes() {
		if n.Name == c.opts.Node {
			continue
		}
		i := slices.IndexFunc(peers, func(p peer.PeerStats) bool { return p.Node == n.Name })
		if i < 0 || !peers[i].Available {
			return fmt.Errorf("%s cannot be reached", n.Name)
		}
	}
	if c.member == nil {
		// External etcd does not notice the restart; the registry being
		// in step says its quorum is up.
		return nil
	}
	// This gateway's etcd member goes down with it: etcd must have one to
	// spare beyond its quorum.
	e := c.etcd.get()
	switch {
	case e.Error != "":
		return fmt.Errorf("etcd: %s", e.Error)
	case time.Since(e.Checked) > 2*etcdPollInterval:
		return errors.New("etcd's members not checked lately")
	case e.Up < e.Quorum+1:
		return fmt.Errorf("etcd has no member to spare: %s", e.Margin)
	}
	return nil
}

// AcquireUpdate waits until the line is whole and nobody holds the update
// lock, then takes it for this gateway's update to version, and keeps it
// until ReleaseUpdate or Close (the restart's new program resumes it with
// HoldUpdate). It returns an error wrapping ErrUpdateHalted if version was
// rolled back on another gateway meanwhile, or ctx's error.
func (c *Cluster) AcquireUpdate(ctx context.Context, version string) error {
	defer c.setWaiting("")
	for {
		why := c.tryUpdate(ctx, version)
		if why == nil {
			c.log.Info("update: took the line's update lock", "version", version)
			return nil
		}
		if errors.Is(why, ErrUpdateHalted) {
			return why
		}
		c.setWaiting(why.Error())
		t := time.NewTimer(updatePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// tryUpdate takes the lock once, or says why it cannot now.
func (c *Cluster) tryUpdate(ctx context.Context, version string) error {
	if h, err := c.UpdateHalted(ctx); err != nil {
		return err
	} else if h != nil && h.Version == version {
		return fmt.Errorf("%w on %s at %s: %s", ErrUpdateHalted, h.Node, h.At.Format(time.RFC3339), h.Reason)
	}
	if err := c.Whole(); err != nil {
		return fmt.Errorf("waiting for the line to be whole: %w", err)
	}
	other, err := c.takeUpdate(ctx, version)
	switch {
	case err != nil:
		return err
	case other == nil:
		return nil
	case other.Node == c.opts.Node:
		// This gateway's own, from before a restart: keep it.
		return c.keepUpdate(ctx, clientv3.LeaseID(other.Lease))
	}
	return fmt.Errorf("waiting for %s, updating to %s since %s", other.Node, other.Version, other.Since.Format(time.RFC3339))
}

// takeUpdate writes the lock for this gateway if nobody holds it, and
// keeps its lease alive; otherwise it returns the holder.
func (c *Cluster) takeUpdate(ctx context.Context, version string) (*UpdateHolder, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	grant, err := c.cli.Grant(cctx, int64(UpdateLockTTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	val, _ := json.Marshal(UpdateHolder{Node: c.opts.Node, Version: version, Since: time.Now().UTC(), Lease: int64(grant.ID)})
	key := c.keyPrefix() + keyUpdateLock
	resp, err := c.cli.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(grant.ID))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil || !resp.Succeeded {
		c.cli.Revoke(context.WithoutCancel(cctx), grant.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	if !resp.Succeeded {
		var other UpdateHolder
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			json.Unmarshal(kvs[0].Value, &other)
		}
		return &other, nil
	}
	return nil, c.keepUpdate(ctx, grant.ID)
}

// errLeaseGone: the lock's lease ran out.
var errLeaseGone = errors.New("the update lock's lease has ended")

// keepUpdate keeps lease alive in the background until ReleaseUpdate or
// Close.
func (c *Cluster) keepUpdate(ctx context.Context, lease clientv3.LeaseID) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ttl, err := c.cli.TimeToLive(cctx, lease)
	cancel()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if ttl.TTL <= 0 {
		return errLeaseGone
	}
	kctx, stop := context.WithCancel(context.Background())
	ch, err := c.cli.KeepAlive(kctx, lease)
	if err != nil {
		stop()
		return fmt.Errorf("etcd: keeping the update lock: %w", err)
	}
	c.upd.mu.Lock()
	if c.upd.cancel != nil {
		c.upd.cancel()
	}
	c.upd.cancel = stop
	c.upd.mu.Unlock()
	go func() {
		for range ch { // drained, as the client requires
		}
	}()
	return nil
}

func (c *Cluster) setWaiting(why string) {
	c.upd.mu.Lock()
	c.upd.wait = why
	c.upd.mu.Unlock()
}

// UpdateWaiting says why this gateway is waiting for the update lock, ""
// when it is not.
func (c *Cluster) UpdateWaiting() string {
	c.upd.mu.Lock()
	defer c.upd.mu.Unlock()
	return c.upd.wait
}

// HoldUpdate is called by a gateway that started on trial: if the line's
// update lock names it (taken before its restart), it keeps the lock's
// lease alive; if the lease ran out during the restart, it takes the lock
// again when free, without waiting for the line (it is already
// updating). It reports whether this gateway holds the lock.
func (c *Cluster) HoldUpdate(ctx context.Context, version string) (bool, error) {
	h, err := c.UpdateHolder(ctx)
	if err != nil {
		return false, err
	}
	if h != nil && h.Node != c.opts.Node {
		return false, nil
	}
	if h != nil {
		err := c.keepUpdate(ctx, clientv3.LeaseID(h.Lease))
		if !errors.Is(err, errLeaseGone) {
			return err == nil, err
		}
	}
	other, err := c.takeUpdate(ctx, version)
	return err == nil && other == nil, err
}

// ReleaseUpdate lets go of the update lock if it names this gateway. A
// halt (non-nil) says the update was rolled back: the mark it leaves makes
// the line's other gateways give the version up.
func (c *Cluster) ReleaseUpdate(ctx context.Context, halt *UpdateHalt) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	key := c.keyPrefix() + keyUpdateLock
	resp, err := c.cli.Get(cctx, key)
	if err != nil {
		return err
	}
	c.stopUpdateKeepAlive()
	if len(resp.Kvs) == 0 {
		return nil
	}
	var h UpdateHolder
	json.Unmarshal(resp.Kvs[0].Value, &h)
	if h.Node != c.opts.Node {
		return nil
	}
	ops := []clientv3.Op{clientv3.OpDelete(key)}
	if halt != nil {
		halt.Node = c.opts.Node
		b, _ := json.Marshal(halt)
		ops = append(ops, clientv3.OpPut(c.keyPrefix()+keyUpdateHalt, string(b)))
	}
	if _, err := c.cli.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).Then(ops...).Commit(); err != nil {
		return err
	}
	c.cli.Revoke(cctx, clientv3.LeaseID(h.Lease))
	if halt != nil {
		c.log.Warn("update: released the line's update lock and halted the line's update", "version", halt.Version, "reason", halt.Reason)
	} else {
		c.log.Info("update: released the line's update lock", "version", h.Version)
	}
	return nil
}

// UpdateHolder returns the gateway holding the update lock, nil when none.
func (c *Cluster) UpdateHolder(ctx context.Context) (*UpdateHolder, error) {
	var h UpdateHolder
	ok, err := c.getJSON(ctx, keyUpdateLock, &h)
	if !ok || err != nil {
		return nil, err
	}
	return &h, nil
}

// UpdateHalted returns the halt mark of the last update rolled back on
// the line, nil when there is none.
func (c *Cluster) UpdateHalted(ctx context.Context) (*UpdateHalt, error) {
	var h UpdateHalt
	ok, err := c.getJSON(ctx, keyUpdateHalt, &h)
	if !ok || err != nil {
		return nil, err
	}
	return &h, nil
}

func (c *Cluster) getJSON(ctx context.Context, k string, v any) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.cli.Get(cctx, c.keyPrefix()+k)
	if err != nil {
		return false, fmt.Errorf("etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return false, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
		return false, fmt.Errorf("%s: %w", k, err)
	}
	return true, nil
}

// stopUpdateKeepAlive stops keeping the lock's lease alive, leaving the
// lock itself: at Close, before a restart into the update, the new
// program resumes it.
func (c *Cluster) stopUpdateKeepAlive() {
	c.upd.mu.Lock()
	if c.upd.cancel != nil {
		c.upd.cancel()
		c.upd.cancel = nil
	}
	c.upd.mu.Unlock()
}

// Node is this gateway's name in the cluster.
func (c *Cluster) Node() string { return c.opts.Node }
