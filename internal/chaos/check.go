package chaos

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// Need says which of a subscription kind's subscribers must receive each
// acknowledged message.
type Need int

const (
	// AnyMember: one of the kind's subscribers, as for a share group, whose
	// members between them get each message once.
	AnyMember Need = iota
	// EverySubscriber: each of the kind's subscribers, as for ordinary
	// subscriptions.
	EverySubscriber
)

// SubKind is one kind of persistent QoS 1 subscription; the harness runs
// one subscriber of each kind on every node.
type SubKind struct {
	Name   string // also the prefix of its client ids: <name>-1 on node 1 ...
	Filter string // e.g. $share/g/chaos/#
	Need   Need
}

// ShareGroup is the default kind: one member of $share/g/chaos/# per node.
var ShareGroup = SubKind{Name: "share", Filter: "$share/g/" + topicRoot + "/#", Need: AnyMember}

// Plain is an ordinary persistent subscriber on every node: every
// acknowledged message must reach each of them. It waits for its own node
// when that node is away rather than resuming elsewhere: a session on a
// node that is down cannot move (Session Present 0 there once its lease is
// gone: what it held is lost with it until sessions are replicated).
var Plain = SubKind{Name: "plain", Filter: topicRoot + "/#", Need: EverySubscriber}

// Unit is a set of subscribers that together must receive every
// acknowledged message at least once and, between them, at most once
// without DUP: a share group, or a single ordinary subscriber.
type Unit struct {
	Kind    string
	Clients []string
}

// clientID names the subscriber of kind k on node i (0-based).
func clientID(k SubKind, i int) string { return fmt.Sprintf("%s-%d", k.Name, i+1) }

// Units derives the delivery units of kinds with one subscriber per node
// over n nodes.
func Units(kinds []SubKind, n int) []Unit {
	var us []Unit
	for _, k := range kinds {
		switch k.Need {
		case AnyMember:
			u := Unit{Kind: k.Name}
			for i := range n {
				u.Clients = append(u.Clients, clientID(k, i))
			}
			us = append(us, u)
		case EverySubscriber:
			for i := range n {
				us = append(us, Unit{Kind: k.Name, Clients: []string{clientID(k, i)}})
			}
		}
	}
	return us
}

// Options tunes the checker.
type Options struct {
	// TakeoverBound is how long an older connection may stay open after a
	// newer connection of its client id had its CONNACK (or after the
	// older one's node could speak again). Default 5 s.
	TakeoverBound time.Duration
	// Settle extends each fault's window of pass-over figures past its end:
	// publishes sent just after a node came back are still the fault's.
	// Default 2 s.
	Settle time.Duration
	// WaitBound is the longest a publish to a node that can answer may
	// wait for its PUBACK during a fault: the line's pass-over bound
	// (1.5 s: a missed pong) with room for a group commit and a loaded
	// machine. Default 2 s.
	WaitBound time.Duration
}

func (o Options) withDefaults() Options {
	if o.TakeoverBound == 0 {
		o.TakeoverBound = 5 * time.Second
	}
	if o.Settle == 0 {
		o.Settle = 2 * time.Second
	}
	if o.WaitBound == 0 {
		o.WaitBound = 2 * time.Second
	}
	return o
}

// Invariant is the verdict on one invariant.
type Invariant struct {
	Name       string
	Violations int
	// Undetermined counts cases the run ended too early to decide; they
	// are not violations.
	Undetermined int
	Examples     []string // the first few violations, in words
}

// Held reports whether the invariant held.
func (i *Invariant) Held() bool { return i.Violations == 0 }

func (i *Invariant) violate(format string, a ...any) {
	i.Violations++
	if len(i.Examples) < 5 {
		i.Examples = append(i.Examples, fmt.Sprintf(format, a...))
	}
}

// Latency is a PUBACK latency summary of the publishes sent in a window.
type Latency struct {
	Label         string
	N             int // publishes waiting in the window that had a PUBACK
	NoAck         int // publishes sent before the window's end that never had one
	P50, P99, Max time.Duration
}

// Report is the checker's verdict and the figures of a run.
type Report struct {
	Sent            int                       // publishes written
	Acked           int                       // PUBACK 0x00
	Refused         map[packet.ReasonCode]int // PUBACK >= 0x80, by reason
	NoAck           int                       // no PUBACK at all (connection lost, node gone)
	Delivered       int                       // acknowledged messages every unit received
	Deliveries      int                       // copies received, all subscribers
	Duplicates      int                       // copies beyond the first, per unit and message
	DupFlagged      int                       // copies received with DUP
	Connects        int                       // connections accepted (CONNACK 0x00)
	RefusedConnects map[packet.ReasonCode]int // CONNACK refusals by reason
	Takeovers       int                       // connections whose client id connected again while they were open
	PassOver        []Latency                 // calm, then each fault
	Invariants      []Invariant
}

// OK reports whether every invariant held.
func (r *Report) OK() bool {
	for i := range r.Invariants {
		if !r.Invariants[i].Held() {
			return false
		}
	}
	return true
}

// Failed lists the names of the invariants that did not hold.
func (r *Report) Failed() []string {
	var out []string
	for i := range r.Invariants {
		if !r.Invariants[i].Held() {
			out = append(out, r.Invariants[i].Name)
		}
	}
	return out
}

// The invariants' names, as reports print them.
const (
	InvNoLoss     = "no-acked-loss"
	InvOneSession = "one-session"
	InvDupFlag    = "dup-flagged"
	InvOrder      = "publisher-order"
	InvMoved      = "moved-session-present"
	InvResumed    = "resumed-session-present"
	InvWait       = "bounded-wait"
)

// missing returns, for each acknowledged message some unit lacks, the
// message and the unit's index.
func missing(s Snapshot, units []Unit) []struct {
	p    Publish
	unit int
} {
	unitsOf := map[string][]int{}
	for ui, u := range units {
		for _, c := range u.Clients {
			unitsOf[c] = append(unitsOf[c], ui)
		}
	}
	got := make([]map[Msg]bool, len(units))
	for i := range got {
		got[i] = map[Msg]bool{}
	}
	for _, d := range s.Deliveries {
		for _, ui := range unitsOf[d.Client] {
			got[ui][d.Msg] = true
		}
	}
	var out []struct {
		p    Publish
		unit int
	}
	for _, p := range s.Publishes {
		if p.Acked.IsZero() || p.Reason != packet.Success {
			continue
		}
		for ui := range units {
			if !got[ui][p.Msg] {
				out = append(out, struct {
					p    Publish
					unit int
				}{p, ui})
			}
		}
	}
	return out
}

// Check judges a run's record. start is the start of the load, from which
// the examples give times; faults are the plan's faults as run, for the
// pass-over figures.
func Check(s Snapshot, units []Unit, faults []Fault, start time.Time, o Options) Report {
	o = o.withDefaults()
	rel := func(t time.Time) string { return fmt.Sprintf("t=%.2fs", t.Sub(start).Seconds()) }
	r := Report{Refused: map[packet.ReasonCode]int{}, RefusedConnects: s.RefusedConnects}

	for _, p := range s.Publishes {
		r.Sent++
		switch {
		case p.Acked.IsZero():
			r.NoAck++
		case p.Reason == packet.Success:
			r.Acked++
		default:
			r.Refused[p.Reason]++
		}
	}
	r.Deliveries = len(s.Deliveries)
	r.Connects = len(s.Conns)

	// 1. No acknowledged message lost.
	loss := Invariant{Name: InvNoLoss}
	lost := map[Msg]bool{}
	type span struct {
		n        int
		from, to time.Time
	}
	spans := map[string]*span{} // per unit: when the lost ones were sent
	for _, m := range missing(s, units) {
		lost[m.p.Msg] = true
		loss.violate("%s/%d (sent to n%d %s, PUBACK %s) never reached %s %v",
			m.p.Msg.Pub, m.p.Msg.Seq, m.p.Node+1, rel(m.p.Sent), rel(m.p.Acked), units[m.unit].Kind, units[m.unit].Clients)
		key := fmt.Sprintf("%s %v", units[m.unit].Kind, units[m.unit].Clients)
		sp := spans[key]
		if sp == nil {
			sp = &span{from: m.p.Sent, to: m.p.Sent}
			spans[key] = sp
		}
		sp.n++
		if m.p.Sent.Before(sp.from) {
			sp.from = m.p.Sent
		}
		if m.p.Sent.After(sp.to) {
			sp.to = m.p.Sent
		}
	}
	if len(spans) > 0 && loss.Violations > len(loss.Examples) {
		// Many: say where they went missing, so the logs can be read at the
		// right moment.
		for _, k := range slices.Sorted(maps.Keys(spans)) {
			sp := spans[k]
			loss.Examples = append(loss.Examples, fmt.Sprintf("in all, %d never reached %s, sent from %s to %s", sp.n, k, rel(sp.from), rel(sp.to)))
		}
	}
	r.Delivered = r.Acked - len(lost)

	// 3. Every duplicate carries DUP, per unit; duplicates counted alike.
	dup := Invariant{Name: InvDupFlag}
	for _, u := range units {
		in := map[string]bool{}
		for _, c := range u.Clients {
			in[c] = true
		}
		copies := map[Msg][]Delivery{}
		for _, d := range s.Deliveries {
			if in[d.Client] {
				copies[d.Msg] = append(copies[d.Msg], d)
			}
		}
		keys := make([]Msg, 0, len(copies))
		for m := range copies {
			keys = append(keys, m)
		}
		// Examples in the order of the messages, for reports that compare.
		slices.SortFunc(keys, func(a, b Msg) int { return cmp.Or(cmp.Compare(a.Pub, b.Pub), cmp.Compare(a.Seq, b.Seq)) })
		for _, m := range keys {
			ds := copies[m]
			r.Duplicates += len(ds) - 1
			var plain []string
			for _, d := range ds {
				if !d.Dup {
					plain = append(plain, fmt.Sprintf("%s via n%d %s", d.Client, s.Conns[d.Conn].Node+1, rel(d.At)))
				}
			}
			if len(plain) > 1 {
				dup.violate("%s/%d reached %s %d times without DUP: %s", m.Pub, m.Seq, u.Kind, len(plain), strings.Join(plain, ", "))
			}
		}
	}
	for _, d := range s.Deliveries {
		if d.Dup {
			r.DupFlagged++
		}
	}

	// 4. Per-publisher order within a subscriber, DUP copies aside.
	order := Invariant{Name: InvOrder}
	byClient := map[string][]Delivery{}
	for _, d := range s.Deliveries {
		if !d.Dup {
			byClient[d.Client] = append(byClient[d.Client], d)
		}
	}
	clients := make([]string, 0, len(byClient))
	for c := range byClient {
		clients = append(clients, c)
	}
	slices.Sort(clients)
	for _, c := range clients {
		ds := byClient[c]
		// Connections of one client are read by goroutines of their own:
		// their arrival stamps, not the append order, say which came first.
		slices.SortStableFunc(ds, func(a, b Delivery) int { return a.At.Compare(b.At) })
		last := map[string]Delivery{}
		for _, d := range ds {
			if l, ok := last[d.Msg.Pub]; ok && d.Msg.Seq < l.Msg.Seq {
				order.violate("%s got %s/%d via n%d %s after %s/%d via n%d %s",
					c, d.Msg.Pub, d.Msg.Seq, s.Conns[d.Conn].Node+1, rel(d.At), l.Msg.Pub, l.Msg.Seq, s.Conns[l.Conn].Node+1, rel(l.At))
				continue // keep the highest seen: one late message is one violation
			}
			last[d.Msg.Pub] = d
		}
	}

	// 2. No session open on two nodes.
	one := Invariant{Name: InvOneSession}
	conns := map[string][]int{}
	for i, c := range s.Conns {
		conns[c.Client] = append(conns[c.Client], i)
	}
	ids := make([]string, 0, len(conns))
	for c := range conns {
		ids = append(ids, c)
	}
	slices.Sort(ids)
	for _, id := range ids {
		cs := conns[id]
		slices.SortStableFunc(cs, func(a, b int) int { return s.Conns[a].Connack.Compare(s.Conns[b].Connack) })
		for k := 0; k+1 < len(cs); k++ {
			a, b := s.Conns[cs[k]], s.Conns[cs[k+1]]
			if !a.Closed.IsZero() && !a.Closed.After(b.Connack) {
				continue // closed before the newer one connected
			}
			r.Takeovers++
			deadline, open := takeoverDeadline(s.Outages, a.Node, b.Connack, o.TakeoverBound)
			switch {
			case open && (a.Closed.IsZero() || a.Closed.After(s.End)):
				one.Undetermined++ // its node never spoke again within the run
			case a.Closed.IsZero() && s.End.After(deadline):
				one.violate("%s: connection on n%d (CONNACK %s) still open at the end (%s), though n%d took the session up at %s",
					id, a.Node+1, rel(a.Connack), rel(s.End), b.Node+1, rel(b.Connack))
			case a.Closed.IsZero():
				one.Undetermined++
			case a.Closed.After(deadline):
				one.violate("%s: connection on n%d closed (%s) at %s, %.1fs after n%d took the session up at %s (bound %v)",
					id, a.Node+1, a.How, rel(a.Closed), a.Closed.Sub(b.Connack).Seconds(), b.Node+1, rel(b.Connack), o.TakeoverBound)
			}
		}
	}

	// 5. A session moved between healthy nodes is found there.
	moved := Invariant{Name: InvMoved}
	for _, m := range s.Moves {
		if m.ExpectPresent && !m.SessionPresent {
			moved.violate("%s moved from n%d to n%d (%s): Session Present 0", m.Client, m.From+1, m.Node+1, rel(m.At))
		}
	}

	// 6. A subscriber's session, once made, is found whenever it comes
	// back, wherever: the faults lose one node (or its card) at a time,
	// and every session has a replica in step before each fault.
	resumed := Invariant{Name: InvResumed}
	made := map[string]bool{}
	for _, c := range s.Conns {
		if c.Kind == "pub" {
			continue
		}
		if made[c.Client] && !c.SessionPresent {
			resumed.violate("%s resumed on n%d at %s with Session Present 0", c.Client, c.Node+1, rel(c.Connack))
		}
		made[c.Client] = true
	}

	// 7. A publish waits at most the pass-over bound, unless its own node
	// is the one dead or frozen (it cannot answer anyone). A node cut off
	// from the others still answers its clients, so its publishers count.
	wait := Invariant{Name: InvWait}
	for _, p := range s.Publishes {
		if p.Acked.IsZero() {
			continue // counted as no PUBACK
		}
		if d := p.Acked.Sub(p.Sent); d > o.WaitBound && !silenced(faults, p) {
			wait.violate("%s/%d to n%d sent at %s waited %.2fs for its PUBACK (bound %v)", p.Msg.Pub, p.Msg.Seq, p.Node+1, rel(p.Sent), d.Seconds(), o.WaitBound)
		}
	}

	r.Invariants = []Invariant{loss, one, dup, order, moved, resumed, wait}
	r.PassOver = passOver(s.Publishes, faults, start, o.Settle)
	return r
}

// silenced reports whether p's own node was killed, frozen or restarting
// (or the whole line was) while p waited: such a node answers nobody, and
// its publishers wait for it by design.
func silenced(faults []Fault, p Publish) bool {
	for _, f := range faults {
		if f.Skipped != "" || f.Start.IsZero() || !p.Sent.Before(f.End) || (!f.Start.Before(p.Acked)) {
			continue
		}
		switch f.Kind {
		case Line:
			return true
		case Kill, Stop, Leader, Wipe:
			if f.Victim == p.Node {
				return true
			}
		}
	}
	return false
}

// takeoverDeadline is when an older connection on node must be closed,
// given the newer one's CONNACK at: bound after it, extended to bound after
// the end of any outage of node overlapping the wait (a frozen or cut-off
// node cannot close anything until it speaks again). open reports an
// outage that had not ended.
func takeoverDeadline(outages []Outage, node int, at time.Time, bound time.Duration) (deadline time.Time, open bool) {
	deadline = at.Add(bound)
	for changed := true; changed; {
		changed = false
		for _, u := range outages {
			if u.Node != node || u.From.After(deadline) || (!u.To.IsZero() && u.To.Before(at)) {
				continue
			}
			if u.To.IsZero() {
				return deadline, true
			}
			if d := u.To.Add(bound); d.After(deadline) {
				deadline, changed = d, true
			}
		}
	}
	return deadline, false
}

// passOver summarises the PUBACK latency of the publishes waiting during
// each fault's window (from its start to settle after its end), and of
// the others ("calm").
func passOver(ps []Publish, faults []Fault, start time.Time, settle time.Duration) []Latency {
	type window struct {
		label    string
		from, to time.Time
	}
	var ws []window
	for i := range faults {
		f := &faults[i]
		if f.Skipped != "" || f.Start.IsZero() {
			continue
		}
		label := fmt.Sprintf("%s n%d %.1fs", f.Kind, f.Victim+1, f.Start.Sub(start).Seconds())
		if f.Kind == Line {
			label = fmt.Sprintf("%s all %.1fs", f.Kind, f.Start.Sub(start).Seconds())
		}
		ws = append(ws, window{label, f.Start, f.End.Add(settle)})
	}
	lat := make([][]time.Duration, len(ws)+1)
	noAck := make([]int, len(ws)+1)
	for _, p := range ps {
		// A publish is the fault's if it was waiting at any time during
		// the window: one sent just before a freeze is held by it.
		slot := 0 // calm
		for i, w := range ws {
			if p.Sent.Before(w.to) && (p.Acked.IsZero() || !p.Acked.Before(w.from)) {
				slot = i + 1
				break
			}
		}
		if p.Acked.IsZero() {
			noAck[slot]++
		} else {
			lat[slot] = append(lat[slot], p.Acked.Sub(p.Sent))
		}
	}
	out := make([]Latency, len(ws)+1)
	for i := range out {
		l := Latency{Label: "calm", N: len(lat[i]), NoAck: noAck[i]}
		if i > 0 {
			l.Label = ws[i-1].label
		}
		if d := lat[i]; len(d) > 0 {
			slices.Sort(d)
			l.P50, l.P99, l.Max = d[len(d)*50/100], d[min(len(d)-1, len(d)*99/100)], d[len(d)-1]
		}
		out[i] = l
	}
	return out
}

// Write prints the report: figures, pass-over, then each invariant.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "  figures: sent %d, acknowledged %d, refused %s, no PUBACK %d; delivered %d of %d acknowledged; deliveries %d, duplicates %d (%d with DUP)\n",
		r.Sent, r.Acked, codes(r.Refused), r.NoAck, r.Delivered, r.Acked, r.Deliveries, r.Duplicates, r.DupFlagged)
	fmt.Fprintf(w, "  connections: %d accepted, CONNACK refusals %s, %d taken over while open\n", r.Connects, codes(r.RefusedConnects), r.Takeovers)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintln(w, "  pass-over (PUBACK latency of the publishes waiting during each fault, to 2s after its end):")
	for _, l := range r.PassOver {
		fmt.Fprintf(w, "    %-22s n=%-6d p50 %-9s p99 %-9s max %-10s no PUBACK %d\n", l.Label, l.N, ms(l.P50), ms(l.P99), ms(l.Max), l.NoAck)
	}
	for i := range r.Invariants {
		inv := &r.Invariants[i]
		verdict := "held"
		if !inv.Held() {
			verdict = fmt.Sprintf("VIOLATED %d times", inv.Violations)
		}
		extra := ""
		if inv.Undetermined > 0 {
			extra = fmt.Sprintf(" (%d undetermined: the run ended first)", inv.Undetermined)
		}
		fmt.Fprintf(w, "  %-23s %s%s\n", inv.Name, verdict, extra)
		for _, e := range inv.Examples {
			fmt.Fprintf(w, "      %s\n", e)
		}
	}
}

func codes(m map[packet.ReasonCode]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]packet.ReasonCode, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("0x%02x×%d", byte(k), m[k]))
	}
	return strings.Join(parts, " ")
}
