package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// Config is one run's setup.
type Config struct {
	Linemq   string        // path of the linemq binary
	Seed     uint64        // decides the plan
	Duration time.Duration // of the fault schedule; the load runs a little longer
	Faults   []FaultKind   // the kinds the plan draws from
	Holds    Holds         // zero: DefaultHolds
	// Kinds are the subscription kinds, one subscriber of each per node;
	// nil: ShareGroup and Plain (a persistent ordinary subscriber).
	Kinds []SubKind
	// PublishEvery is the pause between a publisher's publishes (one in
	// flight at a time); default 10 ms.
	PublishEvery time.Duration
	// Dir keeps the nodes' data and logs (emptied first: a run starts
	// from nothing); default a new temporary directory, removed after a
	// run whose invariants held.
	Dir string
	// Check tunes the checker.
	Check Options
	// Log receives progress lines as the run goes; nil: none.
	Log io.Writer
}

// Result is one run: its plan as executed, and the verdict.
type Result struct {
	Plan     Plan
	Topology string
	Dir      string    // where the logs are
	Start    time.Time // the start of the load, from which times count
	Report   Report
}

// Write prints the run: seed, schedule, figures and invariants.
func (r *Result) Write(w io.Writer) {
	fmt.Fprintf(w, "seed %d on %s (publishers on %s; logs in %s)\n", r.Plan.Seed, r.Topology, nodeList(r.Plan.Publishers), r.Dir)
	fmt.Fprintln(w, "  schedule (planned; -> actual start, what happened, how long):")
	for i := range r.Plan.Faults {
		f := &r.Plan.Faults[i]
		line := "    " + f.Describe()
		switch {
		case f.Skipped != "":
			line += "  SKIPPED: " + f.Skipped
		case !f.Start.IsZero():
			line += fmt.Sprintf("  -> t=%.1fs %s (%.1fs)", f.Start.Sub(r.Start).Seconds(), f.Note, f.End.Sub(f.Start).Seconds())
		default:
			line += "  (not reached)"
		}
		fmt.Fprintln(w, line)
	}
	r.Report.Write(w)
	if r.Report.OK() {
		fmt.Fprintln(w, "  verdict: every invariant held")
	} else {
		fmt.Fprintf(w, "  verdict: FAILED %v\n", r.Report.Failed())
	}
}

func nodeList(ns []int) string {
	s := ""
	for i, n := range ns {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("n%d", n+1)
	}
	return s
}

// Run runs one seed: it starts the cluster and the load, plays the plan,
// drains, and checks. An error means the harness could not run (the
// cluster did not start, namespaces could not be made), not a violation:
// those are in the report.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Holds == (Holds{}) {
		cfg.Holds = DefaultHolds
	}
	if cfg.Kinds == nil {
		cfg.Kinds = []SubKind{ShareGroup, Plain}
	}
	if cfg.PublishEvery == 0 {
		cfg.PublishEvery = 10 * time.Millisecond
	}
	logf := func(format string, a ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, time.Now().Format("15:04:05.000")+" "+format+"\n", a...)
		}
	}
	plan := NewPlan(cfg.Seed, cfg.Duration, cfg.Faults, cfg.Holds)
	res := &Result{Plan: plan}

	// Network namespaces only when a partition is planned: loopback is
	// lighter and needs no privileges.
	var topo Topology
	var err error
	if slices.ContainsFunc(plan.Faults, func(f Fault) bool { return f.Kind == Partition }) {
		if why := NetnsUsable(); why != nil {
			logf("partition faults skipped: %v", why)
		} else if topo, err = NewNetns(os.Getpid()); err != nil {
			return nil, err
		}
	}
	if topo == nil {
		if topo, err = NewLoopback(); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err := topo.Close(); err != nil {
			logf("cleaning up the namespaces: %v", err)
		}
	}()
	res.Topology = topo.String()

	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", fmt.Sprintf("linemq-chaos-%d-", cfg.Seed)); err != nil {
			return nil, err
		}
	} else {
		// A run starts from nothing: an etcd member's data from an
		// earlier run names that run's cluster.
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	res.Dir = dir
	cl := &cluster{bin: cfg.Linemq, dir: dir, topo: topo}
	rec := NewRecord()
	reg := &connSet{}
	subCtx, stopSubs := context.WithCancel(ctx)
	var subWG sync.WaitGroup
	defer func() {
		// In this order: no client reconnects once the nodes go, and no
		// process holds a namespace (deferred above) when it is deleted.
		stopSubs()
		subWG.Wait()
		reg.closeAll()
		cl.stop()
	}()
	logf("seed %d: starting three nodes on %s", cfg.Seed, topo)
	if err := cl.startAll(ctx); err != nil {
		return nil, err
	}

	units := Units(cfg.Kinds, 3)

	// Subscribers first, each on its own node, run until the drain ends.
	var subs []*subscriber
	for _, k := range cfg.Kinds {
		for i := range 3 {
			s := &subscriber{kind: k, client: clientID(k, i), rec: rec, reg: reg, book: cl, moves: make(chan moveCmd, 1), home: i, at: -1}
			subs = append(subs, s)
			subWG.Go(func() { s.run(subCtx) })
		}
	}
	if err := waitRouted(ctx, cl, rec, reg, subs); err != nil {
		return nil, err
	}

	// The load, then the plan.
	stopPubs := make(chan struct{})
	var pubWG sync.WaitGroup
	for _, n := range plan.Publishers {
		p := &publisher{tag: fmt.Sprintf("p%d", n+1), node: n, rec: rec, reg: reg, book: cl, every: cfg.PublishEvery}
		pubWG.Go(func() { p.run(ctx, stopPubs) })
	}
	start := time.Now()
	res.Start = start
	logf("load started: publishers on %s", nodeList(plan.Publishers))
	f := &faulter{cl: cl, topo: topo, rec: rec, subs: subs, logf: logf}
	for i := range plan.Faults {
		ft := &plan.Faults[i]
		if d := time.Until(start.Add(ft.At)); d > 0 {
			if !sleep(ctx, d) {
				break
			}
		}
		if err := f.run(ctx, ft, start); err != nil {
			close(stopPubs)
			pubWG.Wait()
			res.Plan = plan
			return res, fmt.Errorf("fault %s: %w", ft.Describe(), err)
		}
	}
	lastEnd := start
	for _, ft := range plan.Faults {
		if ft.End.After(lastEnd) {
			lastEnd = ft.End
		}
	}
	// Calm after the last fault, so that its pass-over is seen to end.
	sleep(ctx, 3*time.Second)
	close(stopPubs)
	pubWG.Wait()
	logf("load stopped; draining")

	// Drain: until every acknowledged message has arrived and every
	// takeover bound after the last fault has passed, within 30 s.
	bound := cfg.Check.withDefaults().TakeoverBound
	deadline := time.Now().Add(30 * time.Second)
	for {
		settled := time.Now().After(lastEnd.Add(bound + time.Second))
		left := rec.undelivered(units)
		if (left == 0 && settled) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling the record, with a deadline
	}
	snap := rec.Snapshot(time.Now())
	stopSubs()
	res.Plan = plan
	res.Report = Check(snap, units, plan.Faults, start, cfg.Check)
	if res.Report.OK() && cfg.Dir == "" {
		cl.stop()
		os.RemoveAll(dir)
		res.Dir = "(removed)"
	}
	return res, ctx.Err()
}

// sleep waits d unless ctx ends first; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitRouted waits until every node routes to every subscriber: probes
// published on each node reach each of them (a share group gets one probe
// per member per round, the cursor passing each in turn).
func waitRouted(ctx context.Context, cl *cluster, rec *Record, reg *connSet, subs []*subscriber) error {
	deadline := time.Now().Add(60 * time.Second)
	for i := range 3 {
		var c *mconn
		for c == nil {
			res, err := dial(ctx, rec, reg, cl.mqttAddr(i), i, fmt.Sprintf("probe-%d", i+1), "pub", true, 0)
			if err == nil && res.c != nil {
				c = res.c
			} else if time.Now().After(deadline) {
				return fmt.Errorf("probe client cannot connect to n%d: %v (CONNACK 0x%02x)", i+1, err, byte(res.refused))
			} else {
				sleep(ctx, 200*time.Millisecond)
			}
		}
		for n := 1; ; n++ {
			before := make([]int, len(subs))
			for k, s := range subs {
				before[k] = rec.probesOf(s.client)
			}
			for range len(subs) {
				p := packet.Publish{Topic: []byte(topicRoot + "/probe"), QoS: 1, PacketID: 1, Payload: fmt.Appendf(nil, "%s%d/%d", probePrefix, i+1, n)}
				c.write(p.Append(nil, packet.V5))
				c.waitCtl(packet.PUBACK, 1, 5*time.Second)
			}
			routed := waitFor(ctx, 2*time.Second, func() bool {
				for k, s := range subs {
					if rec.probesOf(s.client) <= before[k] {
						return false
					}
				}
				return true
			})
			if routed {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("n%d never routed to every subscriber within 60s", i+1)
			}
		}
		c.write((&packet.Disconnect{}).Append(nil, packet.V5))
		c.close("probe done")
	}
	return nil
}

// waitFor polls cond until it holds (true) or d passes (false).
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) || !sleep(ctx, 20*time.Millisecond) {
			return false
		}
	}
	return true
}

// settleBound bounds the wait for the line to be at rest before a fault.
const settleBound = 60 * time.Second

// faulter plays faults.
type faulter struct {
	cl   *cluster
	topo Topology
	rec  *Record
	subs []*subscriber
	logf func(string, ...any)
}

// run plays one fault and fills in what happened. It returns once the
// cluster is whole again (nodes back and ready, a move done), so that at
// most one node is lost at a time.
func (f *faulter) run(ctx context.Context, ft *Fault, origin time.Time) error {
	ft.Victim = ft.Node
	// The promises are about one failure at a time: the one before must
	// be over everywhere first (its fail-over done, every session's
	// replicas in step again; before a wipe, nothing kept for another
	// node either).
	if why := f.cl.settled(ctx, settleBound, ft.Kind == Wipe); why != "" {
		ft.Note = fmt.Sprintf("line not at rest after %v (%s); ", settleBound, why)
	}
	switch ft.Kind {
	case Leader:
		n, err := f.cl.leader(ctx)
		if err != nil {
			ft.Skipped = err.Error()
			return nil
		}
		ft.Victim = n
	case Partition:
		if _, ok := f.topo.(*loopback); ok {
			ft.Skipped = ErrNoPartition.Error()
			f.logf("fault %s skipped: %v", ft.Describe(), ErrNoPartition)
			return nil
		}
	}
	ft.Start = time.Now()
	f.logf("fault at %.1fs: %s (victim n%d)", ft.Start.Sub(origin).Seconds(), ft.Describe(), ft.Victim+1)
	switch ft.Kind {
	case Kill, Leader, Wipe:
		u := f.rec.outageStart(ft.Victim, ft.Kind, time.Now())
		f.cl.kill(ft.Victim)
		back, note := f.cl.restart, "n%d killed, ready again"
		if ft.Kind == Wipe {
			if err := os.RemoveAll(f.cl.dataDir(ft.Victim)); err != nil {
				f.rec.outageEnd(u, time.Now())
				return err
			}
			back, note = f.cl.replace, "n%d killed and its data directory deleted; a blank replacement joined, ready"
		}
		sleep(ctx, ft.Hold)
		err := back(ctx, ft.Victim)
		f.rec.outageEnd(u, time.Now())
		if err != nil {
			return err
		}
		ft.Note += fmt.Sprintf(note, ft.Victim+1)
	case Line:
		var us [3]int
		for i := range 3 {
			us[i] = f.rec.outageStart(i, Line, time.Now())
		}
		for i := range 3 {
			f.cl.kill(i)
		}
		sleep(ctx, ft.Hold)
		err := f.cl.startAll(ctx)
		for i := range 3 {
			f.rec.outageEnd(us[i], time.Now())
		}
		if err != nil {
			return err
		}
		ft.Note += "all three killed, ready again"
	case Stop:
		u := f.rec.outageStart(ft.Victim, Stop, time.Now())
		if err := f.cl.signal(ft.Victim, syscall.SIGSTOP); err != nil {
			return err
		}
		sleep(ctx, ft.Hold)
		err := f.cl.signal(ft.Victim, syscall.SIGCONT)
		f.rec.outageEnd(u, time.Now())
		if err != nil {
			return err
		}
		ft.Note += fmt.Sprintf("n%d frozen, resumed", ft.Victim+1)
	case Partition:
		u := f.rec.outageStart(ft.Victim, Partition, time.Now())
		if err := f.topo.Cut(ft.Victim); err != nil {
			return err
		}
		var moving []chan struct{}
		if ft.Abrupt {
			// The cut-off node's share-group members give up on it and go
			// to the next node, leaving their connections open: once the
			// line heals the node must close them. Its ordinary
			// subscribers wait for it: one resuming elsewhere would get a
			// new session (Session Present 0 once the node's lease is
			// gone), while the promise to it is that its own node, back,
			// has everything.
			to := (ft.Victim + 1) % 3
			for _, s := range f.subs {
				if s.homeNode() == ft.Victim && s.kind.Need == AnyMember {
					done := make(chan struct{})
					s.moves <- moveCmd{to: to, abrupt: true, done: done}
					moving = append(moving, done)
				}
			}
		}
		sleep(ctx, ft.Hold)
		err := f.topo.Heal(ft.Victim)
		f.rec.outageEnd(u, time.Now())
		if err != nil {
			return err
		}
		if len(moving) > 0 {
			ft.Note += fmt.Sprintf("n%d cut off, its %d subscriber(s) moved abruptly to n%d, healed", ft.Victim+1, len(moving), (ft.Victim+1)%3+1)
		} else {
			ft.Note += fmt.Sprintf("n%d cut off, healed", ft.Victim+1)
		}
		for _, done := range moving {
			if !waitClosed(ctx, done, 30*time.Second) {
				ft.Note += "; a subscriber found no node to move to within 30s"
			}
		}
	case Move:
		// The subscriber named by the fault (its node index), of each
		// kind, share-group member and ordinary subscriber alike:
		// wherever it is now, it moves Step nodes on, while the
		// publishers go on.
		var moving []chan struct{}
		var notes []string
		for _, s := range f.subs {
			if s.client != clientID(s.kind, ft.Node) {
				continue
			}
			from := s.homeNode()
			to := (from + ft.Step) % 3
			// A move between healthy nodes must find the session: the
			// node it is on holds it in the registry. One cut off past
			// its lease just before has still to write its records again.
			healthy := f.cl.waitOwner(ctx, s.client, s.node(), 20*time.Second)
			done := make(chan struct{})
			s.moves <- moveCmd{to: to, abrupt: ft.Abrupt, expectPresent: healthy, done: done}
			moving = append(moving, done)
			ft.Victim = from
			note := fmt.Sprintf("%s n%d -> n%d", s.client, from+1, to+1)
			if !healthy {
				note += " (n" + fmt.Sprint(from+1) + " did not own its session within 20s)"
			}
			notes = append(notes, note)
		}
		ft.Note += strings.Join(notes, ", ")
		for _, done := range moving {
			if !waitClosed(ctx, done, 30*time.Second) {
				ft.Note += "; no CONNACK within 30s"
			}
		}
	default:
		return errors.New("unknown fault")
	}
	ft.End = time.Now()
	return nil
}

// waitClosed waits for ch to close, at most d.
func waitClosed(ctx context.Context, ch chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}
