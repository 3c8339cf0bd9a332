package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// sampleEvery is how often the broker's /proc entries are read.
const sampleEvery = 100 * time.Millisecond

// run is the state of one Run call.
type run struct {
	cfg   Config
	clock *clock
	tag   uint32

	abort     chan struct{} // closed by the first failure
	abortOnce sync.Once
	err       error       // the first failure; read after abort is closed
	closing   atomic.Bool // the run is closing connections: read errors are expected

	loops   sync.WaitGroup // every connection's reader goroutine
	mu      sync.Mutex
	clients []*client
	notes   []string
}

// Run runs the scenario cfg describes against cfg.Broker and returns what it
// measured. It returns an error, and no result, when the run could not be
// carried out: an invalid configuration, a broker that is unreachable or
// refuses a connection or a subscription, a connection that fails mid-run.
// Every wait on the broker is bounded by cfg.Timeout, so a broker that does
// not answer makes Run fail rather than hang.
//
// Cancelling ctx while fanin or fanout publish or drain ends the run early
// with a result whose notes say "interrupted"; cancelling it at any other
// point fails the run with ctx's error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	r := &run{cfg: cfg, clock: &clock{base: time.Now()}, tag: rand.Uint32(), abort: make(chan struct{})}
	res := &Result{
		Label: cfg.Label, Scenario: string(cfg.Scenario), Broker: cfg.Broker,
		MQTT: versionName(cfg.Version), QoS: int(cfg.QoS), BrokerPID: cfg.PID,
	}

	var smp *sampler
	if cfg.PID > 0 {
		var err error
		if smp, err = startSampler(cfg.PID, sampleEvery); err != nil {
			return nil, err
		}
	}
	cpu0 := selfCPU()
	stopPinger := r.startPinger()

	var err error
	if cfg.Scenario == Conns {
		err = r.conns(ctx, res, smp)
	} else {
		err = r.messages(ctx, res)
	}
	r.closeAll()
	stopPinger()

	res.BenchCPUS = (selfCPU() - cpu0).Seconds()
	res.ElapsedS = time.Duration(r.clock.now()).Seconds()
	if smp != nil {
		first, last, peak, serr := smp.finish()
		// Rounded to the millisecond: the kernel counts in 10 ms ticks,
		// and binary fractions of them only add noise to the JSON.
		res.BrokerCPUS = ptr(math.Round((last.cpu-first.cpu).Seconds()*1000) / 1000)
		res.BrokerPeakRSSMiB = ptr(float64(peak) / 1024)
		res.BrokerHWMMiB = ptr(float64(last.hwmKiB) / 1024)
		if serr != nil {
			r.note("the broker process could not be read to the end of the run (%v); its figures cover the run up to then", serr)
		}
	}
	if err != nil {
		return nil, err
	}
	res.Notes = r.notes
	return res, nil
}

// fail records the first error of the run and aborts it. Errors while the
// run closes its own connections are the closing, not failures.
func (r *run) fail(err error) {
	if r.closing.Load() {
		return
	}
	r.abortOnce.Do(func() {
		r.err = err
		close(r.abort)
	})
}

// failed returns the run's failure, or nil.
func (r *run) failed() error {
	select {
	case <-r.abort:
		return r.err
	default:
		return nil
	}
}

// goLoop runs a connection's reader; its error aborts the run.
func (r *run) goLoop(loop func() error) {
	r.loops.Add(1)
	go func() {
		defer r.loops.Done()
		if err := loop(); err != nil {
			r.fail(err)
		}
	}()
}

func (r *run) note(format string, a ...any) {
	r.mu.Lock()
	r.notes = append(r.notes, fmt.Sprintf(format, a...))
	r.mu.Unlock()
}

// dial opens one connection of the run and registers it for closing and
// keep alive.
func (r *run) dial(ctx context.Context, id string, receiveMax uint16, bufSize int) (*client, error) {
	var expiry uint32
	if receiveMax > 0 { // receivers: the only connections that advertise one
		expiry = r.cfg.SessionExpiry
	}
	c, err := dial(ctx, r.cfg.Broker, dialOptions{
		version: r.cfg.Version, id: id, receiveMax: receiveMax, expiry: expiry,
		bufSize: bufSize, timeout: r.cfg.Timeout, clock: r.clock,
	})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.clients = append(r.clients, c)
	r.mu.Unlock()
	return c, nil
}

// closeAll disconnects every connection and waits for their readers.
func (r *run) closeAll() {
	r.closing.Store(true)
	r.mu.Lock()
	cs := r.clients
	r.clients = nil
	r.mu.Unlock()
	var wg sync.WaitGroup
	for i := 0; i < len(cs); i += 256 {
		part := cs[i:min(i+256, len(cs))]
		wg.Go(func() {
			for _, c := range part {
				c.disconnect()
			}
		})
	}
	wg.Wait()
	r.loops.Wait()
}

// startPinger sends PINGREQ on connections whose broker imposed a keep
// alive (v5 Server Keep Alive) and that have been quiet for half of it. One
// goroutine serves every connection: with no keep alive imposed it only
// ticks. The returned function stops it and waits for it.
func (r *run) startPinger() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			r.mu.Lock()
			cs := r.clients
			r.mu.Unlock()
			now := r.clock.now()
			for _, c := range cs {
				if c.pingDue(now) {
					c.write(pingreq) // a failure shows up in the connection's reader
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// wait sleeps for d, returning early with false when the run fails or ctx
// is done.
func (r *run) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-r.abort:
	}
	return false
}
