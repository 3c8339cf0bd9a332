package broker

import (
	"context"
	"math"
	"sync/atomic"
	"time"
)

// A gateway whose process was stopped (SIGSTOP, a VM paused, a machine
// starved for seconds) goes on, when it runs again, from where it was:
// its sockets hold what its clients sent meanwhile, its sessions what was
// routed to them before. But the line did not wait for it: past its lease,
// its sessions were adopted elsewhere from their replicas and their clients
// resumed there. What it then writes on the connections still open to it
// reaches clients that are being served elsewhere: a message of a
// publisher that reconnected to another gateway meanwhile arrives after
// that publisher's later messages, and without DUP (fault-suite seed 25).
// It learns what it lost from etcd, a round trip or more after it runs
// again; its connections' goroutines run at once.
//
// So in a cluster a node watches for its own stalls: a ticker that wakes
// more than stallBound late means the process did not run. From then, and
// from the moment a delivery finds the ticker overdue (the connections may
// run before the watcher does), deliveries to clients wait in their
// sessions' queues until the node's view of the line has caught up with
// etcd (ClusterCatchUp): by then the sessions it lost are gone from it,
// their connections closed, and what is left is its own. A catch-up that
// fails (etcd unreachable) lets them go after catchUpTimeout, as before.

// stallTick is how often the watcher wakes.
const stallTick = 100 * time.Millisecond

// stallBound is how late a wake-up must be to count as a stall: far above
// a garbage collection or a busy scheduler, below the 1.5 s in which the
// other gateways give up on an unanswered delivery.
const stallBound = time.Second

// catchUpTimeout bounds how long deliveries wait after a stall.
const catchUpTimeout = 5 * time.Second

// ClusterCatchUp is a Cluster that can bring this node's view of the line
// up to date on demand: CatchUp returns once every change the line made
// before the call has reached the broker (sessions claimed elsewhere
// evicted), or ctx ends.
type ClusterCatchUp interface {
	CatchUp(ctx context.Context) error
}

// stallWatch is the Server's watch for its own stalls.
type stallWatch struct {
	on     bool      // a cluster that can catch up: the watch runs
	base   time.Time // for monotonic readings
	last   atomic.Int64
	held   atomic.Bool
	stalls atomic.Uint64
	// from and to bound the last stall, in Unix nanoseconds (the
	// kernel's receive timestamps are wall-clock time).
	from, to atomic.Int64
}

// watchStalls runs the watch until the server stops.
func (srv *Server) watchStalls(cu ClusterCatchUp) {
	w := &srv.stall
	t := time.NewTicker(stallTick)
	defer t.Stop()
	for {
		select {
		case <-srv.stopping:
			// Never overdue from now: what the shutdown still writes
			// (a will, a DISCONNECT's last messages) must not wait.
			w.last.Store(math.MaxInt64 / 2)
			return
		case <-t.C:
		}
		now := time.Since(w.base)
		gap := now - time.Duration(w.last.Load())
		if gap <= stallBound || w.held.Load() {
			w.last.Store(int64(now))
			continue
		}
		w.held.Store(true)
		w.last.Store(int64(now))
		end := time.Now().UnixNano()
		w.from.Store(end - int64(gap))
		w.to.Store(end)
		w.stalls.Add(1)
		srv.log.Warn("this gateway did not run for a while (stopped, paused or starved): deliveries to clients wait until its view of the line has caught up",
			"stalled", gap.Round(time.Millisecond))
		go srv.catchUp(cu)
	}
}

// catchUp lets deliveries go again once the cluster has caught up.
func (srv *Server) catchUp(cu ClusterCatchUp) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), catchUpTimeout)
	err := cu.CatchUp(ctx)
	cancel()
	if err != nil {
		srv.log.Warn("catching up with the line after a stall failed; deliveries go on", "err", err)
	} else {
		srv.log.Info("caught up with the line after a stall; deliveries go on", "took", time.Since(start).Round(time.Millisecond))
	}
	if !srv.isStopping() {
		srv.stall.last.Store(int64(time.Since(srv.stall.base)))
	}
	srv.stall.held.Store(false)
	for _, s := range srv.sessionList() {
		s.mu.Lock()
		s.pumpLocked()
		c := s.conn
		s.mu.Unlock()
		if c != nil {
			c.signal()
		}
	}
}

// holding reports whether deliveries to clients wait: a stall was seen
// and the line not caught up with yet, or the watcher is overdue (the
// process has just run again, and the watcher not yet).
func (w *stallWatch) holding() bool {
	if !w.on {
		return false
	}
	return w.held.Load() || time.Since(w.base)-time.Duration(w.last.Load()) > stallBound
}

// readDuring reports whether a publish read now, whose bytes the kernel
// received at rx (Unix ns; 0 when unknown), may have waited out a stall
// in its socket: its publisher may have given up on it and sent it again,
// and later ones, through another gateway.
func (w *stallWatch) readDuring(rx int64) bool {
	if !w.on {
		return false
	}
	return w.holding() || rx != 0 && rx >= w.from.Load() && rx < w.to.Load()
}
