package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Why a watch ended, besides the errors etcd gives.
var (
	errWatchStalled = errors.New("registry: watch silent; etcd unreachable?")
	errWatchClosed  = errors.New("registry: watch closed")
)

// runWatcher keeps the copy: one full read, then a watch from the read's
// revision; whenever the watch ends (compaction, a stall, a closed
// stream) it reads again and applies only the difference.
func (r *Registry) runWatcher() {
	defer r.wg.Done()
	var backoff time.Duration
	for r.ctx.Err() == nil {
		rev, err := r.load()
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			r.log.Warn("reading the registry failed; retrying", "err", err)
			r.health.set(sourceWatch, err)
			backoff = min(max(2*backoff, 100*time.Millisecond), maxRetryBackoff)
			if !r.pause(backoff/2 + rand.N(backoff/2+1)) {
				return
			}
			continue
		}
		backoff = 0
		r.health.set(sourceWatch, nil)
		r.setReady(true, false)

		err = r.watch(rev)
		if r.ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, rpctypes.ErrCompacted):
			// Not a fault: history we had not read yet is gone. Re-read
			// at once; the copy stays healthy.
			r.stats.compacted.Add(1)
			r.log.Info("watch compacted; re-reading the registry", "from", rev)
		default:
			r.stats.watchLost.Add(1)
			r.log.Warn("watch lost; re-reading the registry", "err", err)
			r.health.set(sourceWatch, err)
		}
	}
}

// pause waits d, or until Close; it reports false on Close.
func (r *Registry) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// load reads the whole prefix and brings the copy to it, reporting the
// difference. It returns the read's revision.
func (r *Registry) load() (int64, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.RequestTimeout)
	resp, err := r.cli.Get(ctx, r.keys.prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return 0, fmt.Errorf("registry: read: %w", err)
	}
	n := r.stats.loads.Add(1)
	rev := resp.Header.Revision
	r.mu.Lock()
	events := r.copy.replace(resp.Kvs, rev, n > 1)
	r.mu.Unlock()
	r.emit(events)
	r.delivered.Store(rev)
	if n > 1 {
		r.log.Info("registry re-read", "revision", rev, "changes", len(events))
	}
	return rev, nil
}

// watch follows the prefix from rev+1 until the watch ends, and returns
// why. Besides etcd's own progress notifications it asks for one every
// WatchCheck; silence for WatchTimeout means etcd is out of reach (a
// client's watch otherwise waits forever for a stream to come back).
func (r *Registry) watch(rev int64) error {
	// Require a leader: a member cut off from its quorum cancels the
	// watch rather than serving a copy that no longer moves.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(r.ctx))
	defer cancel()
	wch := r.cli.Watch(ctx, r.keys.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	tick := time.NewTicker(r.opts.WatchCheck)
	defer tick.Stop()
	heard := time.Now()
	healthy := true
	for {
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case wr, ok := <-wch:
			if !ok {
				return errWatchClosed
			}
			if err := wr.Err(); err != nil {
				return err
			}
			heard = time.Now()
			if !healthy {
				// The stream came back on its own before we gave up on
				// it; nothing was missed (it resumes where it stopped).
				healthy = true
				r.health.set(sourceWatch, nil)
			}
			switch {
			case len(wr.Events) > 0:
				r.apply(wr)
			case wr.IsProgressNotify():
				// Every event up to the header's revision has been sent
				// (the server reports progress only to a synced watch),
				// so the copy is current to it. The created notice's
				// header says no such thing: events from before the
				// watch started may still be on their way.
				r.mu.Lock()
				r.copy.rev = max(r.copy.rev, wr.Header.Revision)
				rev := r.copy.rev
				r.mu.Unlock()
				r.delivered.Store(rev)
			}
		case <-tick.C:
			silent := time.Since(heard)
			if silent >= r.opts.WatchTimeout {
				return errWatchStalled
			}
			if silent >= r.opts.WatchTimeout/2 && healthy {
				// Not given up yet, but the copy may be going stale.
				healthy = false
				r.health.set(sourceWatch, errWatchStalled)
			}
			// Same metadata as the watch's context, so the request goes
			// down the watch's own stream.
			pctx, pcancel := context.WithTimeout(ctx, r.opts.WatchCheck)
			_ = r.cli.RequestProgress(pctx) // an error is silence, handled above
			pcancel()
		}
	}
}

// apply brings one watch response into the copy and reports its events.
func (r *Registry) apply(wr clientv3.WatchResponse) {
	now := time.Now()
	var (
		events  []Event
		ownRevs []int64
	)
	r.mu.Lock()
	for _, ev := range wr.Events {
		kv := ev.Kv
		before := len(events)
		if ev.Type == clientv3.EventTypeDelete {
			events = r.copy.del(string(kv.Key), kv.ModRevision, false, events)
		} else {
			events = r.copy.put(kv, kv.ModRevision, false, events)
		}
		if len(events) > before && r.own(&events[len(events)-1]) {
			if n := len(ownRevs); n == 0 || ownRevs[n-1] != kv.ModRevision {
				ownRevs = append(ownRevs, kv.ModRevision)
			}
		}
	}
	r.copy.rev = max(r.copy.rev, wr.Header.Revision)
	rev := r.copy.rev
	r.mu.Unlock()
	for _, rev := range ownRevs {
		r.lag.delivered(rev, now)
	}
	r.emit(events)
	r.delivered.Store(rev)
}

// own reports whether an event is about a key this node wrote, for the lag.
func (r *Registry) own(ev *Event) bool {
	if ev.Kind == SessionOwned {
		return ev.Owner.Node == r.opts.Node
	}
	return ev.Node == r.opts.Node && ev.Kind != SessionReleased
}

func (r *Registry) emit(events []Event) {
	if r.opts.OnEvent == nil {
		return
	}
	for _, ev := range events {
		r.opts.OnEvent(ev)
	}
}
