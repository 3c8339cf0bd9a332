package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// This file runs FanIn and FanOut in five phases: subscribe the receivers,
// connect the publishers, publish, drain, and add up.

// topicOf is publisher i's topic.
func (r *run) topicOf(i int) string {
	return fmt.Sprintf("plant/line%d/dev%d/telemetry", i%r.cfg.Lines, i)
}

// fanout is how many receivers should get each message.
func (r *run) fanout() int {
	if r.cfg.Scenario == FanOut {
		return r.cfg.Subscribers
	}
	return 1
}

// messages runs FanIn or FanOut.
func (r *run) messages(ctx context.Context, res *Result) error {
	cfg := &r.cfg
	res.Publishers, res.Receivers = cfg.Publishers, cfg.receivers()
	res.PayloadBytes, res.RateTarget = cfg.PayloadSize, cfg.Rate
	if cfg.Scenario == FanIn {
		res.Group = cfg.Group
	}

	rcvs, err := r.subscribe(ctx)
	if err != nil {
		return err
	}
	pubs, err := r.connectPublishers(ctx)
	if err != nil {
		return err
	}
	start, end, interrupted, err := r.publish(ctx, pubs)
	if err != nil {
		return err
	}
	if !interrupted {
		if interrupted, err = r.drain(ctx, pubs, rcvs); err != nil {
			return err
		}
	}
	if interrupted {
		r.note("interrupted: publishing and the drain were cut short")
	}
	r.closeAll()
	if err := r.failed(); err != nil {
		return err
	}
	r.tally(res, pubs, rcvs, start, end)
	return nil
}

// subscribe connects the receivers and subscribes them, and returns once
// every SUBACK has arrived, so nothing published later is lost to a
// subscription that did not exist yet. A refused subscription is an error.
func (r *run) subscribe(ctx context.Context) ([]*receiver, error) {
	cfg := &r.cfg
	filter := "plant/+/+/telemetry"
	var shared *seenSet
	if cfg.Scenario == FanIn {
		filter = "$share/" + cfg.Group + "/" + filter
		shared = newSeenSet(cfg.Publishers)
	}
	rcvs := make([]*receiver, cfg.receivers())
	for i := range rcvs {
		c, err := r.dial(ctx, fmt.Sprintf("lmqb-%08x-w%d", r.tag, i), cfg.WorkerReceiveMax, 64<<10)
		if err != nil {
			return nil, err
		}
		if shared != nil && !c.sharedSubs {
			return nil, errors.New("bench: the broker does not support shared subscriptions (CONNACK Shared Subscription Available 0)")
		}
		set := shared
		if set == nil {
			set = newSeenSet(cfg.Publishers) // each ordinary subscriber should see every message
		}
		rc := newReceiver(c, set, r.tag, cfg.Publishers, cfg.Rate > 0)
		rcvs[i] = rc
		r.goLoop(rc.loop) // started first: it is what reads the SUBACK
		if err := rc.subscribe(filter, cfg.QoS); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", c.id, err)
		}
	}
	timeout := time.NewTimer(cfg.Timeout)
	defer timeout.Stop()
	for _, rc := range rcvs {
		select {
		case err := <-rc.suback:
			if err != nil {
				return nil, err
			}
		case <-timeout.C:
			return nil, fmt.Errorf("bench: %s: no SUBACK within %v", rc.c.id, cfg.Timeout)
		case <-r.abort:
			return nil, r.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if g := rcvs[0].granted.Load(); g < int32(cfg.QoS) {
		r.note("the broker granted QoS %d to QoS %d subscriptions: deliveries are QoS %d", g, cfg.QoS, g)
	}
	return rcvs, nil
}

// connectPublishers connects every publisher before any starts, so that
// they start together, and checks what the broker's CONNACK allows.
func (r *run) connectPublishers(ctx context.Context) ([]*publisher, error) {
	cfg := &r.cfg
	limit := uint64(maxCounter)
	if cfg.Count > 0 {
		limit = uint64(min(cfg.Count, maxCounter))
	}
	interval := 0.0
	if cfg.Rate > 0 {
		interval = float64(time.Second) / (cfg.Rate / float64(cfg.Publishers))
	}
	pubs := make([]*publisher, cfg.Publishers)
	for i := range pubs {
		c, err := r.dial(ctx, fmt.Sprintf("lmqb-%08x-p%d", r.tag, i), 0, 4<<10)
		if err != nil {
			return nil, err
		}
		if cfg.QoS > c.maxQoS {
			return nil, fmt.Errorf("bench: the broker's Maximum QoS is %d; QoS %d publishes would be a protocol error", c.maxQoS, cfg.QoS) // [MQTT-3.2.2-11]
		}
		p := &publisher{
			c: c, idx: i, topic: []byte(r.topicOf(i)), qos: cfg.QoS, tag: r.tag, size: cfg.PayloadSize,
			limit: limit, interval: interval, window: int32(min(cfg.Inflight, int(c.receiveMax))), // [MQTT-3.3.4-9]
			wake: make(chan struct{}, 1),
		}
		pk := packet.Publish{QoS: cfg.QoS, Topic: p.topic, PacketID: 1, Payload: make([]byte, cfg.PayloadSize)}
		if sz := pk.Size(c.v); c.maxPacket > 0 && sz > int(c.maxPacket) {
			return nil, fmt.Errorf("bench: a %d-byte PUBLISH exceeds the broker's Maximum Packet Size %d", sz, c.maxPacket) // [MQTT-3.2.2-15]
		}
		pubs[i] = p
		r.goLoop(p.readLoop)
	}
	return pubs, nil
}

// publish runs the publishers from start to end (clock times) until their
// count, the duration, a failure or ctx ends it.
func (r *run) publish(ctx context.Context, pubs []*publisher) (start, end int64, interrupted bool, err error) {
	cfg := &r.cfg
	stop := make(chan struct{})
	var senders sync.WaitGroup
	start = r.clock.now()
	for _, p := range pubs {
		senders.Go(func() {
			if err := p.send(start, stop); err != nil {
				r.fail(err)
			}
		})
	}
	sent := make(chan struct{})
	go func() { senders.Wait(); close(sent) }()

	var deadline <-chan time.Time
	if cfg.Duration > 0 {
		t := time.NewTimer(cfg.Duration)
		defer t.Stop()
		deadline = t.C
	}
	// A broker that keeps the connections open but stops acknowledging
	// would leave a -count run waiting for window credit for ever: fail it
	// once nothing has moved for cfg.Timeout.
	progress := func() (n int64) {
		for _, p := range pubs {
			n += p.sent.Load() + p.acked.Load() + p.refused.Load()
		}
		return n
	}
	tick := time.NewTicker(min(time.Second, cfg.Timeout))
	defer tick.Stop()
	lastProgress, lastMove := int64(-1), time.Now()
loop:
	for {
		select {
		case <-sent:
			break loop
		case <-deadline:
			break loop
		case <-r.abort:
			break loop
		case <-ctx.Done():
			interrupted = true
			break loop
		case <-tick.C:
			if n := progress(); n != lastProgress {
				lastProgress, lastMove = n, time.Now()
			} else if time.Since(lastMove) >= cfg.Timeout {
				r.fail(fmt.Errorf("bench: no publish sent or acknowledged for %v", cfg.Timeout))
			}
		}
	}
	close(stop)
	<-sent // a sender blocked in a write returns within cfg.Timeout
	return start, r.clock.now(), interrupted, r.failed()
}

// drain waits, for up to cfg.Drain, for the outstanding acknowledgements
// and then for the deliveries: until everything expected has arrived, or
// nothing has arrived for half the drain time, at least a second (a broker
// that dropped QoS 0 messages will not send them later; one starved of CPU
// for a moment still might). It reports whether ctx cut it short.
func (r *run) drain(ctx context.Context, pubs []*publisher, rcvs []*receiver) (interrupted bool, err error) {
	cfg := &r.cfg
	inflight := func() (n int32) {
		for _, p := range pubs {
			n += p.inflight.Load()
		}
		return n
	}
	expected := func() (n int64) {
		for _, p := range pubs {
			if cfg.QoS == 0 {
				n += p.sent.Load()
			} else {
				n += p.acked.Load()
			}
		}
		return n * int64(r.fanout())
	}
	distinct := func() (n int64) {
		for _, rc := range rcvs {
			n += rc.distinct.Load()
		}
		return n
	}
	end := time.Now().Add(cfg.Drain)
	quiet := min(cfg.Drain, max(time.Second, cfg.Drain/2))
	last, lastChange := int64(-1), time.Now()
	for time.Now().Before(end) {
		d := distinct()
		if d != last {
			last, lastChange = d, time.Now()
		}
		if inflight() == 0 && (d >= expected() || time.Since(lastChange) >= quiet) {
			return false, nil
		}
		if !r.wait(ctx, 10*time.Millisecond) {
			if err := r.failed(); err != nil {
				return false, err
			}
			return true, nil
		}
	}
	return false, nil
}

// tally fills res from the publishers' and receivers' counters. It runs
// after closeAll, when every loop has returned and the counters are final.
func (r *run) tally(res *Result, pubs []*publisher, rcvs []*receiver, start, end int64) {
	cfg := &r.cfg
	res.Inflight = math.MaxInt
	for _, p := range pubs {
		res.Published += p.sent.Load()
		res.Acked += p.acked.Load()
		res.Refused += p.refused.Load()
		res.NoMatch += p.nomatch.Load()
		res.Inflight = min(res.Inflight, int(p.window))
	}
	if cfg.QoS == 0 {
		res.Acked = res.Published // nothing to wait for: sent is all there is
		res.Inflight = 0
	}
	res.Unacked = res.Published - res.Acked - res.Refused

	var hist histogram
	var lastAt int64
	res.ReceiverCounts = make([]int64, len(rcvs))
	for i, rc := range rcvs {
		n := rc.received.Load()
		res.ReceiverCounts[i] = n
		res.Delivered += n
		res.Distinct += rc.distinct.Load()
		res.Duplicates += rc.dups
		res.Foreign += rc.foreign
		lastAt = max(lastAt, rc.lastAt.Load())
		hist.merge(&rc.hist)
	}
	res.Expected = res.Acked * int64(r.fanout())
	res.Lost = max(0, res.Expected-res.Distinct)

	res.DurationS = time.Duration(end - start).Seconds()
	if res.DurationS > 0 {
		res.PublishRate = float64(res.Published) / res.DurationS
	}
	if d := time.Duration(lastAt - start).Seconds(); d > 0 {
		res.DeliveryRate = float64(res.Delivered) / d
	}
	if res.Delivered > 0 {
		// Each receiver's count against an even split: 1.0 is exact.
		even := float64(res.Delivered) / float64(len(rcvs))
		lo, hi := math.Inf(1), 0.0
		for _, n := range res.ReceiverCounts {
			lo, hi = min(lo, float64(n)/even), max(hi, float64(n)/even)
		}
		res.ShareMin, res.ShareMax = ptr(lo), ptr(hi)
	}
	if cfg.Rate > 0 && hist.n > 0 {
		ms := func(us uint64) *float64 { return ptr(float64(us) / 1000) }
		res.LatencySamples = int64(hist.n)
		res.LatencyP50Ms, res.LatencyP99Ms = ms(hist.quantile(0.50)), ms(hist.quantile(0.99))
		res.LatencyP999Ms, res.LatencyMaxMs = ms(hist.quantile(0.999)), ms(hist.max)
	}

	if res.Refused > 0 {
		r.note("the broker refused %d publishes with an error reason code", res.Refused)
	}
	if res.NoMatch > 0 {
		r.note("the broker reported no matching subscribers for %d publishes", res.NoMatch)
	}
	if res.Unacked > 0 {
		r.note("%d publishes were still unacknowledged at the end of the drain", res.Unacked)
	}
	if res.Foreign > 0 {
		r.note("%d deliveries were not this run's messages and were ignored", res.Foreign)
	}
	if cfg.Count == 0 && res.Published >= int64(maxCounter)*int64(cfg.Publishers) {
		r.note("publishers stopped at %d messages each, the most one run can track", maxCounter)
	}
}
