package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/gateway/update"
)

// TestRollingUpgrade upgrades a line of three real processes, each hosting
// an etcd member, under QoS 1 load, the way a plant would: one bundle of
// this build is
// uploaded to all three gateways at once, and the line's update lock lets
// them restart into it one at a time, each only once the line is whole
// again and the one before has committed its trial. The clients are
// ordinary MQTT clients: when their gateway goes away they connect to the
// next and resume their session. Every acknowledged publish must reach a
// member of the share group, at most one gateway may be away at any
// moment, and every gateway ends on the new version, committed.
//
// The line starts on this build too, or on the build LINEMQ_UPDATE_FROM
// names: make update-test builds the previous commit for it, so that for a
// while the line runs two versions together, as a real upgrade does.
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and an etcd quorum")
	}
	from := cmp.Or(os.Getenv("LINEMQ_UPDATE_FROM"), binary)
	line := startUpdateLine(t, from)
	c, mqtt, web, priv := line.c, line.mqtt, line.web, line.priv

	got := &crashTracker{seen: map[uint64]int{}}
	var workers []*roamer
	for i := range 3 {
		workers = append(workers, startRoamer(t, mqtt, i, fmt.Sprint("w", i+1), got))
	}
	var pubs []*roamingPublisher
	for i := range 3 {
		pubs = append(pubs, startRoamingPublisher(t, mqtt, i, uint64(i+1)))
	}
	flow(t, pubs, 300)
	fromVersion := updateStatus(t, web[0]).Version

	// Which gateways answer, every 50 ms, for the whole upgrade.
	var (
		awayMu  sync.Mutex
		away    [3]time.Duration // how long each did not answer
		maxAway int              // the most away at once
	)
	watchStop := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		var since [3]time.Time
		for {
			select {
			case <-watchStop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			n := 0
			for i := range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+web[i]+"/healthz", nil)
				resp, err := http.DefaultClient.Do(req)
				cancel()
				up := err == nil && resp.StatusCode == 200
				if resp != nil {
					resp.Body.Close()
				}
				awayMu.Lock()
				switch {
				case !up && since[i].IsZero():
					since[i] = time.Now()
				case up && !since[i].IsZero():
					away[i] += time.Since(since[i])
					since[i] = time.Time{}
				}
				if !up {
					n++
				}
				maxAway = max(maxAway, n)
				awayMu.Unlock()
			}
		}
	}()

	// One bundle, to every gateway at once.
	bundle := bundleSelf(t, priv, "v-next")
	upgradeStart := time.Now()
	for i := range 3 {
		if code, waits := line.upload(t, i, bundle); code != 200 || !waits {
			t.Fatalf("upload to n%d: %d, waits for the line %v", i+1, code, waits)
		}
	}
	committed := regexp.MustCompile(`msg="update: committed`)
	// Once the first gateway is on the new version, the line runs two.
	mixed := make(chan []string, 1)
	go func() {
		var versions []string
		waitFor(4*time.Minute, func() bool {
			var p struct {
				Nodes []struct{ Name, Version string }
			}
			if getPanel(web[0], "/api/v1/cluster", &p) != nil {
				return false
			}
			versions = versions[:0]
			for _, n := range p.Nodes {
				versions = append(versions, n.Name+" "+n.Version)
			}
			return slices.ContainsFunc(p.Nodes, func(n struct{ Name, Version string }) bool { return n.Version == testVersion })
		})
		mixed <- versions
	}()
	var order []string
	var orderMu sync.Mutex
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			c.ds[i].waitLine(t, committed, 4*time.Minute)
			orderMu.Lock()
			order = append(order, fmt.Sprintf("n%d at %.1f s", i+1, time.Since(upgradeStart).Seconds()))
			orderMu.Unlock()
		})
	}
	wg.Wait()
	upgrade := time.Since(upgradeStart)
	versionsMidway := <-mixed
	flow(t, pubs, 300) // traffic after the last commit
	close(watchStop)
	<-watchDone

	var acked []uint64
	var maxWait time.Duration
	slow := 0
	for _, p := range pubs {
		a, w, s := p.finish()
		acked = append(acked, a...)
		maxWait, slow = max(maxWait, w), slow+s
	}
	waitFor(time.Minute, func() bool { m, _ := got.missing(acked); return m == 0 })
	missing, dups := got.missing(acked)
	resumed, fresh := 0, 0
	var freshAt []string
	for _, w := range workers {
		r, f := w.stop()
		resumed, fresh, freshAt = resumed+r, fresh+f, append(freshAt, w.freshAt...)
	}
	awayMu.Lock()
	t.Logf("rolling upgrade of 3 gateways in %.1f s (commits: %s); away: n1 %.1f s, n2 %.1f s, n3 %.1f s; at most %d away at once",
		upgrade.Seconds(), strings.Join(order, ", "), away[0].Seconds(), away[1].Seconds(), away[2].Seconds(), maxAway)
	t.Logf("%d publishes acknowledged, %d of them never delivered; %d duplicates; longest wait for a PUBACK %v, %d publishes sent again after their gateway went; members resumed %d times with Session Present 1, %d without",
		len(acked), missing, dups, maxWait.Round(time.Millisecond), slow, resumed, fresh)
	if missing > 0 {
		t.Errorf("%d acknowledged messages never reached a member", missing)
	}
	if maxAway > 1 {
		t.Errorf("%d gateways were away at once", maxAway)
	}
	awayMu.Unlock()
	if fresh > 0 {
		t.Errorf("members resumed %d times with Session Present 0: %s", fresh, strings.Join(freshAt, "; "))
	}
	t.Logf("from %s to %s; the line's versions once the first gateway had the new one: %s", fromVersion, testVersion, strings.Join(versionsMidway, ", "))
	if fromVersion != testVersion {
		old := slices.ContainsFunc(versionsMidway, func(v string) bool { return strings.HasSuffix(v, " "+fromVersion) })
		if !old || !slices.ContainsFunc(versionsMidway, func(v string) bool { return strings.HasSuffix(v, " "+testVersion) }) {
			t.Errorf("the line never ran both versions together: %v", versionsMidway)
		}
	}
	for i := range 3 {
		if st := updateStatus(t, web[i]); st.Committed != "v-next (slot a)" || st.Trial != "" || st.Version != testVersion {
			t.Errorf("node %d after the upgrade: %+v", i+1, st)
		}
	}
}

// updateStatus reads a gateway's /api/v1/update.
func updateStatus(t *testing.T, addr string) (st struct {
	Version   string `json:"version"`
	Committed string `json:"committed"`
	Trial     string `json:"trial"`
}) {
	t.Helper()
	if err := getPanel(addr, "/api/v1/update", &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// getPanel reads one of the API's answers as the admin.
func getPanel(addr, path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
	req.SetBasicAuth("ops", "ops-pw")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// roamer is a share-group member that, when its gateway goes away, resumes
// its session on the next one.
type roamer struct {
	stopping atomic.Bool
	done     chan struct{}
	mu       sync.Mutex
	resumed  int // reconnections with Session Present 1
	fresh    int // and without
	freshAt  []string
	cur      *worker
}

func startRoamer(t *testing.T, addrs []string, first int, id string, got *crashTracker) *roamer {
	t.Helper()
	r := &roamer{done: make(chan struct{})}
	r.cur = startWorker(t, addrs[first], id, true, got)
	go func() {
		defer close(r.done)
		i := first
		for {
			<-r.cur.done
			if r.stopping.Load() {
				return
			}
			for {
				i = (i + 1) % len(addrs)
				c, present, err := dialMQTT(addrs[i], id, false)
				if err == nil {
					r.mu.Lock()
					if present {
						r.resumed++
					} else {
						r.fresh++
						r.freshAt = append(r.freshAt, fmt.Sprintf("%s on n%d at %s", id, i+1, time.Now().Format("15:04:05.000")))
					}
					r.cur = consume(c, present, got)
					r.mu.Unlock()
					break
				}
				if r.stopping.Load() {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return r
}

// stop ends the member and returns how often it resumed with and without
// its session.
func (r *roamer) stop() (resumed, fresh int) {
	r.stopping.Store(true)
	r.mu.Lock()
	r.cur.conn.Conn.Close()
	r.mu.Unlock()
	<-r.done
	return r.resumed, r.fresh
}

// roamingPublisher publishes numbered QoS 1 messages one at a time; when
// its gateway goes away it connects to the next, resumes its session and
// sends the unacknowledged message again.
type roamingPublisher struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	acked []uint64
	wait  time.Duration // the longest wait for a PUBACK
	again int           // publishes sent again on another connection
}

func startRoamingPublisher(t *testing.T, addrs []string, first int, tag uint64) *roamingPublisher {
	t.Helper()
	id := fmt.Sprint("rpub", tag)
	c, _, err := dialMQTT(addrs[first], id, true)
	if err != nil {
		t.Fatal(err)
	}
	p := &roamingPublisher{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer func() { c.Conn.Close() }()
		i := first
		for seq := uint64(1); ; seq++ {
			select {
			case <-p.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			payload := []byte(strconv.FormatUint(tag*1e9+seq, 10))
			sent := time.Now()
			for attempt := 0; ; attempt++ {
				if attempt > 0 {
					p.mu.Lock()
					p.again++
					p.mu.Unlock()
				}
				pub := packet.Publish{Topic: []byte("cl/x"), QoS: 1, PacketID: uint16(seq%60000 + 1), Payload: payload}
				if c.Write(pub.Append(nil, packet.V5)) == nil {
					h, body, err := c.Read(30 * time.Second)
					if err == nil && h.Type == packet.PUBACK {
						var a packet.Ack
						a.Decode(packet.V5, h.Type, body)
						if a.Reason == packet.Success {
							p.mu.Lock()
							p.acked = append(p.acked, tag*1e9+seq)
							p.wait = max(p.wait, time.Since(sent))
							p.mu.Unlock()
							break
						}
						time.Sleep(50 * time.Millisecond)
						continue // refused (a gateway between states): send it again
					}
				}
				c.Conn.Close()
				for {
					select {
					case <-p.stop:
						return
					default:
					}
					i = (i + 1) % len(addrs)
					var err error
					if c, _, err = dialMQTT(addrs[i], id, false); err == nil {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}
	}()
	return p
}

func (p *roamingPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// finish stops p and returns what was acknowledged, the longest wait for
// a PUBACK and how many publishes went again on another connection.
func (p *roamingPublisher) finish() ([]uint64, time.Duration, int) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.acked), p.wait, p.again
}

// bundleSelf signs the linemq the tests run with priv (PEM) into a bundle
// labelled version.
func bundleSelf(t *testing.T, priv []byte, version string) []byte {
	t.Helper()
	return bundleProgram(t, priv, version, binary)
}

// bundleProgram signs program, a linemq build, with priv (PEM) into a
// bundle labelled version. The program makes it (linemq update bundle),
// not the test: compressing 40 MB in a test built with -race takes a
// minute.
func bundleProgram(t *testing.T, priv []byte, version, program string) []byte {
	t.Helper()
	dir := t.TempDir()
	key, out := filepath.Join(dir, "plant.key"), filepath.Join(dir, "self.bundle")
	writeFile(t, key, string(priv))
	cmd := exec.Command(binary, "update", "bundle", "-key", key, "-version", version, "-o", out, program)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("linemq update bundle: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// updateLine is three gateways, each hosting an etcd member, on fixed
// ports (a gateway comes back where its clients look), with an admin who
// may upload bundles signed by priv.
type updateLine struct {
	c         *cluster3
	mqtt, web []string
	priv      []byte
	args      [3][]string
}

func startUpdateLine(t *testing.T, program string) *updateLine {
	t.Helper()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	os.Mkdir(keys, 0o755)
	priv, pub, _ := update.GenerateKey()
	writeFile(t, filepath.Join(keys, "plant.pub"), string(pub))
	h, err := auth.NewHash([]byte("ops-pw"), 10)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "passwd"), "ops:"+h+"\n")
	conf := filepath.Join(dir, "linemq.yaml")
	writeFile(t, conf, "auth:\n  password_file: "+filepath.Join(dir, "passwd")+"\n  allow_anonymous: true\n"+
		"update:\n  keys_dir: "+keys+"\n  trial: 3s\n  admins: [ops]\n")
	addrs := freeAddrs(t, 12)
	l := &updateLine{c: newCluster3At(t, addrs[:6]), mqtt: addrs[6:9], web: addrs[9:], priv: priv}
	c := l.c
	for i := range 3 {
		l.args[i] = append(c.args(i), "-config", conf, "-mqtt-listen", l.mqtt[i], "-http-listen", l.web[i])
		c.ds[i] = startProgram(t, program, l.args[i]...)
	}
	for i := range 3 {
		c.ready(i)
	}
	return l
}

// upload sends bundle to gateway i as the admin and returns the status
// code and whether the gateway said it waits for the line.
func (l *updateLine) upload(t *testing.T, i int, bundle []byte) (int, bool) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://"+l.web[i]+"/api/v1/update", bytes.NewReader(bundle))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.SetBasicAuth("ops", "ops-pw")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res struct {
		WaitsForLine bool `json:"waits_for_line"`
	}
	json.NewDecoder(resp.Body).Decode(&res)
	return resp.StatusCode, res.WaitsForLine
}

// TestRollingUpgradeHalted: a bundle whose program exits at start is
// uploaded to a whole line. The first gateway to take the line's update
// lock restarts into it; it exits, and its next start (the test stands in
// for systemd's Restart=) rolls it back and lets go of the lock with a
// halt mark; the two other gateways, waiting with the same version
// installed, give it up rather than try it in turn. The line never has
// more than that one gateway away.
func TestRollingUpgradeHalted(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and an etcd quorum")
	}
	l := startUpdateLine(t, binary)
	k, _ := update.ParsePrivateKey(l.priv)
	var b bytes.Buffer
	script := []byte("#!/bin/sh\necho 'v-bad: exiting at start' >&2\nexit 3\n")
	if err := update.Write(&b, k, "v-bad", update.Arch(), time.Now(), []update.Source{{Name: "linemq", Mode: 0o755, Data: script}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if code, waits := l.upload(t, i, b.Bytes()); code != 200 || !waits {
			t.Fatalf("upload to n%d: %d, waits for the line %v", i+1, code, waits)
		}
	}
	// The gateway that took the lock exits; systemd would start it again.
	var first int
	select {
	case <-l.c.ds[0].exited:
		first = 0
	case <-l.c.ds[1].exited:
		first = 1
	case <-l.c.ds[2].exited:
		first = 2
	case <-time.After(2 * time.Minute):
		t.Fatal("no gateway restarted into the bad version")
	}
	if code := l.c.ds[first].exitCode(t, time.Second); code != 3 {
		t.Fatalf("n%d exited %d, want the bad version's 3", first+1, code)
	}
	l.c.ds[first] = start(t, l.args[first]...)
	l.c.ds[first].waitLine(t, regexp.MustCompile(`msg="update: rolled back" version=v-bad`), 30*time.Second)
	l.c.ds[first].waitLine(t, regexp.MustCompile(`msg="update: released the line's update lock and halted the line's update" .*version=v-bad`), 60*time.Second)
	for i := range 3 {
		if i == first {
			continue
		}
		l.c.ds[i].waitLine(t, regexp.MustCompile(`msg="update: giving up the installed version: its update failed elsewhere on the line" .*version=v-bad`), time.Minute)
		select {
		case <-l.c.ds[i].exited:
			t.Fatalf("n%d restarted", i+1)
		default:
		}
	}
	for i := range 3 {
		var st struct {
			Version   string `json:"version"`
			Committed string `json:"committed"`
			Trial     string `json:"trial"`
			Last      *struct {
				Version, Reason string
			} `json:"last_rollback"`
		}
		if err := getPanel(l.web[i], "/api/v1/update", &st); err != nil {
			t.Fatal(err)
		}
		if st.Trial != "" || st.Last == nil || st.Last.Version != "v-bad" {
			t.Errorf("n%d: %+v", i+1, st)
			continue
		}
		t.Logf("n%d: last rollback of v-bad: %s", i+1, st.Last.Reason)
		if i != first && !strings.Contains(st.Last.Reason, "halted on n"+strconv.Itoa(first+1)) {
			t.Errorf("n%d gave v-bad up for another reason: %q", i+1, st.Last.Reason)
		}
	}
	var panel struct {
		Update struct {
			Holder *struct{ Node string }
			Halted *struct{ Node, Version string }
		}
	}
	if !waitFor(15*time.Second, func() bool {
		return getPanel(l.web[0], "/api/v1/cluster", &panel) == nil && panel.Update.Halted != nil && panel.Update.Holder == nil
	}) {
		t.Errorf("the cluster panel's update: %+v", panel.Update)
	}
}
