package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// dialers is how many connections the Conns scenario opens at once: enough
// to keep the broker's accept loop busy, few enough not to look like a SYN
// flood to it.
const dialers = 32

// minConnBytes is the growth per connection below which the Conns figure
// is flagged as not meaningful.
const minConnBytes = 64

// conns runs the Conns scenario: open cfg.Conns idle connections and take
// the broker's RSS growth per connection.
func (r *run) conns(ctx context.Context, res *Result, smp *sampler) error {
	cfg := &r.cfg
	// Let the broker's memory settle from whatever it did before.
	if !r.wait(ctx, min(cfg.Settle, 500*time.Millisecond)) {
		return r.stopped(ctx)
	}
	before := smp.current()

	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(dialers, cfg.Conns) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.Conns) || r.failed() != nil || ctx.Err() != nil {
					return
				}
				// A small buffer for the CONNACK, dropped afterwards:
				// idle connections are never read, so the bench's own
				// memory stays small at 10,000 of them.
				c, err := r.dial(ctx, fmt.Sprintf("lmqb-%08x-c%d", r.tag, i), 0, 64)
				if err != nil {
					if errors.Is(err, syscall.EMFILE) {
						err = fmt.Errorf("%w (raise the open-files limit: ulimit -n)", err)
					}
					r.fail(err)
					return
				}
				c.fr = nil
			}
		})
	}
	wg.Wait()
	if err := r.failed(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	elapsed := time.Since(start)
	if !r.wait(ctx, cfg.Settle) {
		return r.stopped(ctx)
	}
	after := smp.current()

	r.mu.Lock()
	cs := r.clients
	r.mu.Unlock()
	live := 0
	for _, c := range cs {
		if !peerClosed(c.nc) {
			live++
		}
	}
	if live < len(cs) {
		r.note("the broker closed %d of the %d connections before the measurement; the figure is per open connection", len(cs)-live, len(cs))
	}
	res.Conns = live
	res.ConnRate = ptr(float64(len(cs)) / elapsed.Seconds())
	res.BrokerRSSBeforeMiB = ptr(float64(before.rssKiB) / 1024)
	res.BrokerRSSAfterMiB = ptr(float64(after.rssKiB) / 1024)
	if live > 0 {
		res.BytesPerConn = ptr(float64(after.rssKiB-before.rssKiB) * 1024 / float64(live))
	}
	if live > 0 && (after.rssKiB-before.rssKiB)*1024 < int64(live)*minConnBytes {
		// No broker keeps a connection in so little; it reused memory it
		// already held (a garbage-collected runtime, or an allocator, does
		// not hand freed memory back at once).
		r.note("the broker's RSS grew by under %d bytes a connection (%d KiB before, %d KiB after): it reused memory it already held; measure against a freshly started broker", minConnBytes, before.rssKiB, after.rssKiB)
	}
	return nil
}

// stopped is the error for a run ended before it measured anything.
func (r *run) stopped(ctx context.Context) error {
	if err := r.failed(); err != nil {
		return err
	}
	return ctx.Err()
}

// peerClosed reports whether the broker has closed nc or is closing it,
// without blocking. An idle connection is sent nothing but PINGRESP (and
// only when the broker imposed a keep alive), so peerClosed reads what is
// waiting: PINGRESPs followed by nothing to read mean open; end-of-file, an
// error, or anything else (a DISCONNECT) mean closed.
func peerClosed(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	pingresp := packet.AppendPingresp(nil)
	closed := false
	var b [256]byte
	raw.Read(func(fd uintptr) bool {
		for {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EAGAIN:
				return true
			case err == syscall.EINTR:
				continue
			case err != nil || n == 0 || n%len(pingresp) != 0:
				closed = true
				return true
			}
			for i := 0; i < n; i += len(pingresp) {
				if !bytes.Equal(b[i:i+len(pingresp)], pingresp) {
					closed = true
					return true
				}
			}
		}
	})
	return closed
}
