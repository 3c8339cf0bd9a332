package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdPollInterval and etcdPollTimeout: how often etcd's figures are
// refreshed for the status page, and how long one member may take.
const (
	etcdPollInterval = 5 * time.Second
	etcdPollTimeout  = 2 * time.Second
)

// EtcdStatus is the etcd cluster as last polled, every member listed up or
// down: what an operator needs to know before the next failure.
type EtcdStatus struct {
	// Healthy: every member answered and they agree on a leader.
	Healthy bool   `json:"healthy"`
	Leader  string `json:"leader"` // the leader member's name ("" when none is known)
	// Members and Up count the members and those that answered; Quorum
	// is how many must be up for the registry to work.
	Members int `json:"members"`
	Up      int `json:"up"`
	Quorum  int `json:"quorum"`
	// Margin says in words how many more failures the registry survives,
	// e.g. "2 of 3 up: one more failure stops the registry".
	Margin string `json:"margin"`
	// Checked is when the figures were taken; zero before the first poll.
	Checked   time.Time      `json:"checked"`
	Error     string         `json:"error"` // why the poll failed as a whole (member list)
	Endpoints []EtcdEndpoint `json:"endpoints"`
}

// EtcdEndpoint is one etcd member and its Status answer.
type EtcdEndpoint struct {
	Endpoint    string  `json:"endpoint"`
	Member      string  `json:"member"` // the member's name
	Up          bool    `json:"up"`
	Leader      bool    `json:"leader"` // this member is the leader
	Version     string  `json:"version"`
	DBSizeBytes int64   `json:"db_size_bytes"`
	RaftTerm    uint64  `json:"raft_term"`
	RaftIndex   uint64  `json:"raft_index"`
	RTTSeconds  float64 `json:"rtt_seconds"` // how long its Status took
	Error       string  `json:"error"`
}

// quorumWords says how far the registry is from losing its quorum.
func quorumWords(up, members int) string {
	if members == 0 {
		return "no members known"
	}
	q := members/2 + 1
	head := fmt.Sprintf("%d of %d up: ", up, members)
	switch spare := up - q; {
	case spare < 0:
		return head + "no quorum, the registry has stopped"
	case spare == 0:
		return head + "one more failure stops the registry"
	case spare == 1:
		return head + "survives one more failure"
	default:
		return head + fmt.Sprintf("survives %d more failures", spare)
	}
}

// etcdStatus keeps the etcd cluster's status fresh in the background, so
// that the status page reads a cached copy and never waits for etcd, and
// feeds the line's gateways (line/ entries, embedded members) to nodes.
type etcdStatus struct {
	cli      *clientv3.Client
	prefix   string
	embedded bool // members are gateways
	nodes    *lineNodes
	last     atomic.Pointer[EtcdStatus]
	update   atomic.Pointer[LineUpdate] // the update keys, as last read
	stop     chan struct{}
	done     chan struct{}
}

// startEtcdStatus polls cli every etcdPollInterval until close.
func startEtcdStatus(cli *clientv3.Client, prefix string, embedded bool, nodes *lineNodes) *etcdStatus {
	e := &etcdStatus{cli: cli, prefix: prefix, embedded: embedded, nodes: nodes, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(e.done)
		t := time.NewTicker(etcdPollInterval)
		defer t.Stop()
		for {
			e.poll()
			select {
			case <-e.stop:
				return
			case <-t.C:
			}
		}
	}()
	return e
}

// readUpdate reads the line's update keys (updatelock.go).
func (e *etcdStatus) readUpdate(ctx context.Context) {
	resp, err := e.cli.Get(ctx, e.prefix+"update/", clientv3.WithPrefix())
	if err != nil {
		return
	}
	u := &LineUpdate{}
	for _, kv := range resp.Kvs {
		switch strings.TrimPrefix(string(kv.Key), e.prefix) {
		case keyUpdateLock:
			u.Holder = new(UpdateHolder)
			json.Unmarshal(kv.Value, u.Holder)
		case keyUpdateHalt:
			u.Halted = new(UpdateHalt)
			json.Unmarshal(kv.Value, u.Halted)
		}
	}
	e.update.Store(u)
}

// get returns the last status; before the first poll, a zero one.
func (e *etcdStatus) get() EtcdStatus {
	if s := e.last.Load(); s != nil {
		return *s
	}
	return EtcdStatus{Error: "not polled yet"}
}

func (e *etcdStatus) close() {
	close(e.stop)
	<-e.done
}

// poll asks the member list for every member, then each member for its
// Status at once, each step within etcdPollTimeout.
func (e *etcdStatus) poll() {
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the poll ends with close, not up to 4 s later
		select {
		case <-e.stop:
			cancel()
		case <-base.Done():
		}
	}()
	out := &EtcdStatus{Checked: time.Now().UTC()}
	names := map[uint64]string{}
	ctx, cancelList := context.WithTimeout(base, etcdPollTimeout)
	ml, err := e.cli.MemberList(ctx)
	var line []string
	if err == nil {
		line, err = readLine(ctx, e.cli, e.prefix)
	}
	if err == nil {
		e.readUpdate(ctx)
	}
	cancelList()
	if err != nil {
		out.Error = "member list: " + err.Error()
		// Still ask the endpoints the client was given.
		for _, ep := range e.cli.Endpoints() {
			out.Endpoints = append(out.Endpoints, EtcdEndpoint{Endpoint: ep})
		}
	} else {
		var members []string
		for _, m := range ml.Members {
			names[m.ID] = m.Name
			ep := EtcdEndpoint{Member: m.Name}
			if len(m.ClientURLs) > 0 {
				ep.Endpoint = m.ClientURLs[0]
			}
			if m.Name == "" {
				ep.Member = fmt.Sprintf("%x (not started)", m.ID)
			}
			members = append(members, m.Name)
			out.Endpoints = append(out.Endpoints, ep)
		}
		e.nodes.add(line, "registered")
		if e.embedded {
			e.nodes.add(members, "etcd member")
		}
		e.nodes.prune(line, members, e.embedded)
	}
	ctx, cancelStatus := context.WithTimeout(base, etcdPollTimeout)
	defer cancelStatus()
	leaders := make([]uint64, len(out.Endpoints))
	var wg sync.WaitGroup
	for i := range out.Endpoints {
		r := &out.Endpoints[i]
		if r.Endpoint == "" {
			r.Error = "no client URL (a member added but not started)"
			continue
		}
		wg.Go(func() {
			start := time.Now()
			st, err := e.cli.Status(ctx, r.Endpoint)
			r.RTTSeconds = time.Since(start).Seconds()
			if err != nil {
				r.Error = err.Error()
				return
			}
			r.Up = true
			if r.Member == "" {
				r.Member = names[st.Header.MemberId]
			}
			r.Leader = st.Leader != 0 && st.Leader == st.Header.MemberId
			r.Version, r.DBSizeBytes, r.RaftTerm, r.RaftIndex = st.Version, st.DbSize, st.RaftTerm, st.RaftIndex
			r.Error = strings.Join(st.Errors, "; ")
			leaders[i] = st.Leader
		})
	}
	wg.Wait()
	out.Members = len(out.Endpoints)
	out.Quorum = out.Members/2 + 1
	out.Healthy = out.Error == "" && out.Members > 0
	for i, r := range out.Endpoints {
		if r.Up {
			out.Up++
		}
		if !r.Up || r.Error != "" || leaders[i] == 0 || leaders[i] != leaders[slices.IndexFunc(out.Endpoints, func(x EtcdEndpoint) bool { return x.Up })] {
			out.Healthy = false
		}
		if leaders[i] != 0 && out.Leader == "" {
			out.Leader = names[leaders[i]]
		}
	}
	out.Margin = quorumWords(out.Up, out.Members)
	e.last.Store(out)
}
