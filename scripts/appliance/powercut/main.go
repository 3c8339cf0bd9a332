// Command powercut is the host side of `make powercut-test`
// (scripts/appliance/powercut-test.sh): it boots the arm64 linemq under
// qemu-system-aarch64 with its data partition on a virtio disk (an ext4
// image file), sends QoS 1 messages to persistent subscribers through the
// hostfwd port, kills QEMU with SIGKILL in the middle of the traffic (the
// guest loses its page cache and everything in flight, as at a power cut),
// boots again from what the cut left on the disk, and repeats. The disk
// goes through QEMU's blklogwrites driver, so a cut can leave either only
// the writes covered by the guest's last completed flush (the log replayed
// on the image the boot started from: a disk whose volatile cache is lost)
// or every write QEMU had issued (the image file as the SIGKILL left it;
// the host's page cache keeps it). After the last cut it
// checks that every message whose PUBACK reached a publisher is delivered
// to every subscriber, the one that was offline the whole time included,
// and that the database file was healthy after every cut:
//   - on the host, on a copy of the image as the cut left it: e2fsck
//     replays the journal, must then find the file system clean, debugfs
//     dumps linemq.db and the host's `linemq db check` reads it;
//   - in the guest, where the init runs `linemq db check` on the mounted
//     data partition before starting linemq.
//
// It prints the counts and exits 1 if an acknowledged message is missing
// or a check failed. Every wait has a deadline.
package main

import (
	"bufio"
	binenc "encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

var (
	kernel     = flag.String("kernel", "", "guest kernel (Debian's arm64 vmlinuz)")
	initrd     = flag.String("initrd", "", "guest initramfs (its init mounts /dev/vda at the data dir)")
	image      = flag.String("image", "", "the data partition: an ext4 image file, written in place")
	mode       = flag.String("mode", "batch", "storage.sync in the guest: always or batch")
	cuts       = flag.Int("cuts", 3, "power cuts")
	perCut     = flag.Int("acks-per-cut", 150, "cut once this many more publishes were acknowledged in a boot ...")
	cutAfter   = flag.Duration("cut-after", 6*time.Second, "... or after this long with traffic, whichever comes first")
	publishers = flag.Int("publishers", 4, "QoS 1 publishers")
	hostLinemq = flag.String("linemq", "", "linemq built for the host, for `linemq db check` on the image's file (empty: skip the host check)")
	workDir    = flag.String("work", "", "directory for the consoles and the image copies (default: a temporary one)")
	cacheMode  = flag.String("cache", "writeback", "QEMU cache mode of the image file: writeback, none or unsafe (ignores flushes)")
	diskModel  = flag.String("model", "alternate", "what a cut leaves on the disk: flushed (only the writes the guest had flushed: QEMU's blklogwrites log replayed up to its last flush), kill (the image as the SIGKILL left it: every write QEMU had issued), or alternate (flushed at odd cuts, kill at even ones)")
	extraArgs  = flag.String("append", "", "more kernel arguments (linemq.mount=OPTS: ext4 mount options in the guest)")
	bootWait   = flag.Duration("boot-timeout", 120*time.Second, "longest wait for /readyz after a boot")
	drainWait  = flag.Duration("drain-timeout", 90*time.Second, "longest wait for the deliveries after the last boot")
)

func main() {
	flag.Parse()
	if *kernel == "" || *initrd == "" || *image == "" {
		fmt.Fprintln(os.Stderr, "usage: powercut -kernel VMLINUZ -initrd INITRD -image DATA.img [-mode always|batch] [-cuts N] [-linemq HOSTBIN]")
		os.Exit(2)
	}
	if *workDir == "" {
		d, err := os.MkdirTemp("", "linemq-powercut-")
		check(err)
		defer os.RemoveAll(d)
		*workDir = d
	}
	r := &run{}
	ok := r.main()
	r.q.kill()
	if !ok {
		os.Exit(1)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "powercut:", err)
		os.Exit(1)
	}
}

// guest is one boot of QEMU.
type guest struct {
	n       int
	cmd     *exec.Cmd
	exited  chan struct{}
	console string
	mqtt    string
	http    string
	base    string // -model flushed: the image as this boot found it
	log     string // -model flushed: blklogwrites' log of this boot
}

type qemu struct{ g *guest }

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// boot starts QEMU on the image and waits until linemq answers /readyz.
func (q *qemu) boot(n int) (*guest, error) {
	g := &guest{n: n, exited: make(chan struct{}), console: filepath.Join(*workDir, fmt.Sprintf("console-%s-%d.log", *mode, n))}
	mp, hp := freePort(), freePort()
	g.mqtt = fmt.Sprintf("127.0.0.1:%d", mp)
	g.http = fmt.Sprintf("127.0.0.1:%d", hp)
	out, err := os.Create(g.console)
	if err != nil {
		return nil, err
	}
	g.cmd = exec.Command("qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a53", "-smp", "2", "-m", "512",
		"-nographic", "-no-reboot",
		"-kernel", *kernel, "-initrd", *initrd,
		"-append", strings.TrimSpace("console=ttyAMA0 panic=-1 loglevel=4 linemq.sync="+*mode+" "+*extraArgs),
		"-netdev", fmt.Sprintf("user,id=n0,restrict=on,hostfwd=tcp:%s-:1883,hostfwd=tcp:%s-:8080", g.mqtt, g.http),
		"-device", "virtio-net-device,netdev=n0",
	)
	// Every write and flush the guest makes goes through blklogwrites,
	// which logs it (dm-log-writes format) before completing it; the log's
	// super block counts the entries up to the last flush. The image file
	// itself gets every write, as without the log.
	base := filepath.Join(*workDir, fmt.Sprintf("base-%s.img", *mode))
	if err := copyFile(*image, base); err != nil {
		return nil, err
	}
	g.base = base
	g.log = filepath.Join(*workDir, fmt.Sprintf("writes-%s-%d.log", *mode, n))
	if err := os.WriteFile(g.log, nil, 0o644); err != nil {
		return nil, err
	}
	cache := map[string]string{
		"writeback": "cache.direct=off,cache.no-flush=off",
		"none":      "cache.direct=on,cache.no-flush=off",
		"unsafe":    "cache.direct=off,cache.no-flush=on",
	}[*cacheMode]
	if cache == "" {
		return nil, fmt.Errorf("-cache %q: writeback, none or unsafe", *cacheMode)
	}
	g.cmd.Args = append(g.cmd.Args,
		"-blockdev", fmt.Sprintf("driver=file,node-name=img,filename=%s,%s", *image, cache),
		"-blockdev", fmt.Sprintf("driver=file,node-name=wlog,filename=%s", g.log),
		"-blockdev", "driver=blklogwrites,node-name=data,file=img,log=wlog,log-sector-size=512",
		"-device", "virtio-blk-device,drive=data,write-cache=on")
	g.cmd.Stdout, g.cmd.Stderr = out, out
	if err := g.cmd.Start(); err != nil {
		out.Close()
		return nil, err
	}
	q.g = g
	go func() { g.cmd.Wait(); out.Close(); close(g.exited) }()
	start := time.Now()
	deadline := start.Add(*bootWait)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-g.exited:
			return g, fmt.Errorf("boot %d: QEMU exited during boot (%s)", n, g.console)
		default:
		}
		if resp, err := hc.Get("http://" + g.http + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				fmt.Printf("  boot %d: ready after %.1f s (MQTT %s)\n", n, time.Since(start).Seconds(), g.mqtt)
				return g, nil
			}
		}
		if time.Now().After(deadline) {
			return g, fmt.Errorf("boot %d: no /readyz within %v (%s)", n, *bootWait, g.console)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// kill is the power cut: SIGKILL, nothing of QEMU's runs after it.
func (q *qemu) kill() {
	if q.g == nil || q.g.cmd.Process == nil {
		return
	}
	q.g.cmd.Process.Kill()
	select {
	case <-q.g.exited:
	case <-time.After(10 * time.Second):
	}
}

// conn is one MQTT v5 connection that reports failures rather than
// stopping, so that clients can reconnect across the cuts.
type conn struct {
	*brokertest.Client
	nc net.Conn
}

func dial(addr, id string, clean bool) (*conn, error) {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	c := &conn{Client: &brokertest.Client{Conn: nc, Version: packet.V5}, nc: nc}
	cp := packet.Connect{ProtocolName: []byte("MQTT"), Version: packet.V5, ClientID: []byte(id), CleanStart: clean}
	cp.Props.Set(packet.PropSessionExpiry)
	cp.Props.SessionExpiry = 3600
	if err := c.write(cp.Append(nil)); err != nil {
		nc.Close()
		return nil, err
	}
	h, body, err := c.Read(5 * time.Second)
	if err != nil || h.Type != packet.CONNACK {
		nc.Close()
		return nil, fmt.Errorf("no CONNACK: %v", err)
	}
	var ca packet.Connack
	if err := ca.Decode(packet.V5, body); err != nil || ca.Reason != packet.Success {
		nc.Close()
		return nil, fmt.Errorf("CONNACK %v %v", ca.Reason, err)
	}
	return c, nil
}

func (c *conn) write(b []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := c.nc.Write(b)
	return err
}

// tracker counts, per subscriber, how often each sequence number arrived.
type tracker struct {
	mu   sync.Mutex
	seen map[uint64]int
}

func (t *tracker) add(seq uint64) { t.mu.Lock(); t.seen[seq]++; t.mu.Unlock() }

// count returns how many of acked arrived, how many never did, and the
// deliveries beyond the first of any message.
func (t *tracker) count(acked []uint64) (delivered, missing, dups int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range acked {
		if t.seen[s] == 0 {
			missing++
		} else {
			delivered++
		}
	}
	for _, n := range t.seen {
		if n > 1 {
			dups += n - 1
		}
	}
	return
}

type run struct {
	q    qemu
	addr atomic.Value // the current boot's MQTT address

	ackedMu sync.Mutex
	acked   []uint64

	stopPub, stopRecv atomic.Bool
	pubWG, recvWG     sync.WaitGroup

	trackers map[string]*tracker
}

const topic = "powercut/data"

var subscribers = []string{"online-1", "online-2", "away"}

func (r *run) ackedN() int { r.ackedMu.Lock(); defer r.ackedMu.Unlock(); return len(r.acked) }

func (r *run) main() bool {
	fmt.Printf("== storage.sync: %s, %d cuts, disk model %s, image cache=%s %s\n", *mode, *cuts, *diskModel, *cacheMode, *extraArgs)
	g, err := r.q.boot(1)
	if err != nil {
		return r.fail(err, g)
	}
	r.addr.Store(g.mqtt)
	r.trackers = map[string]*tracker{}
	for _, id := range subscribers {
		r.trackers[id] = &tracker{seen: map[uint64]int{}}
		c, err := dial(g.mqtt, id, true)
		if err != nil {
			return r.fail(fmt.Errorf("subscribe %s: %v", id, err), g)
		}
		s := packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte(topic + "/#"), QoS: 1}}}
		c.write(s.Append(nil, packet.V5))
		if h, _, err := c.Read(10 * time.Second); err != nil || h.Type != packet.SUBACK {
			return r.fail(fmt.Errorf("subscribe %s: %v %v", id, h.Type, err), g)
		}
		c.nc.Close()
	}
	// online-1 and online-2 receive throughout; "away" is offline until
	// after the last cut.
	for _, id := range subscribers[:2] {
		r.recvWG.Add(1)
		go r.receive(id)
	}
	for p := range *publishers {
		r.pubWG.Add(1)
		go r.publish(p)
	}

	type cutResult struct {
		acked     int
		hostCheck string
		hostOK    bool
	}
	var results []cutResult
	var models []string
	for i := 1; i <= *cuts; i++ {
		target := r.ackedN() + *perCut
		deadline := time.Now().Add(*cutAfter)
		for r.ackedN() < target && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		before := r.ackedN()
		r.q.kill()
		fmt.Printf("  cut %d: SIGKILL to QEMU with %d publishes acknowledged so far (%d in this boot)\n", i, before, before-(target-*perCut))
		if cutModel(i) == "flushed" {
			n, kept, err := replayFlushed(r.q.g.base, r.q.g.log)
			if err != nil {
				return r.fail(fmt.Errorf("cut %d: replaying the write log: %v", i, err), r.q.g)
			}
			if err := os.Rename(r.q.g.base, *image); err != nil {
				return r.fail(err, r.q.g)
			}
			fmt.Printf("  cut %d: the disk keeps only what the guest had flushed: %d of %d logged writes replayed on the image the boot found\n", i, kept, n)
		} else {
			fmt.Printf("  cut %d: the disk keeps every write QEMU had issued: the image as the SIGKILL left it\n", i)
		}
		models = append(models, cutModel(i))
		os.Remove(r.q.g.log)
		os.Remove(r.q.g.base)
		res := cutResult{acked: before}
		res.hostCheck, res.hostOK = hostCheck(i)
		fmt.Printf("  cut %d: image as the cut left it: %s\n", i, res.hostCheck)
		results = append(results, res)
		if g, err = r.q.boot(i + 1); err != nil {
			return r.fail(err, g)
		}
		r.addr.Store(g.mqtt)
	}
	// Let the last boot carry some traffic too, then stop publishing.
	target := r.ackedN() + *perCut/2
	deadline := time.Now().Add(*cutAfter)
	for r.ackedN() < target && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.stopPub.Store(true)
	r.pubWG.Wait()
	r.ackedMu.Lock()
	all := append([]uint64(nil), r.acked...)
	r.ackedMu.Unlock()

	// "away" comes back, for the first time since it subscribed.
	r.recvWG.Add(1)
	go r.receive("away")
	deadline = time.Now().Add(*drainWait)
	for {
		done := true
		for _, id := range subscribers {
			if _, m, _ := r.trackers[id].count(all); m > 0 {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // late duplicates
	r.stopRecv.Store(true)
	r.recvWG.Wait()

	// The guest's own check, at every boot after a cut, before linemq
	// started on the file.
	guestRe := regexp.MustCompile(`powercut-init: db check: (.*)`)
	guestOK := 0
	for i := 2; i <= *cuts+1; i++ {
		b, _ := os.ReadFile(filepath.Join(*workDir, fmt.Sprintf("console-%s-%d.log", *mode, i)))
		m := guestRe.FindSubmatch(b)
		line := "no result on the console"
		if m != nil {
			line = strings.TrimSpace(string(m[1]))
		}
		if m != nil && strings.HasPrefix(line, "ok") {
			guestOK++
		}
		fmt.Printf("  boot %d: guest's linemq db check before start: %s\n", i, line)
	}

	ok := true
	hostOK := 0
	for _, res := range results {
		if res.hostOK {
			hostOK++
		}
	}
	fmt.Printf("  result (%s): %d cuts, %d publishes acknowledged\n", *mode, *cuts, len(all))
	for _, id := range subscribers {
		d, m, dups := r.trackers[id].count(all)
		fmt.Printf("    %-9s delivered %d of %d acknowledged, missing %d, duplicates %d\n", id, d, len(all), m, dups)
		if m > 0 {
			ok = false
		}
	}
	fmt.Printf("    db check: host %d of %d cuts healthy, guest %d of %d boots healthy\n", hostOK, len(results), guestOK, *cuts)
	fmt.Printf("POWERCUT mode=%s cuts=%d(%s) acked=%d", *mode, *cuts, strings.Join(models, ","), len(all))
	for _, id := range subscribers {
		d, m, dups := r.trackers[id].count(all)
		fmt.Printf(" %s=%d/%d/%d", id, d, m, dups)
	}
	fmt.Printf(" dbcheck_host=%d/%d dbcheck_guest=%d/%d\n", hostOK, len(results), guestOK, *cuts)
	if *hostLinemq != "" && hostOK != len(results) {
		ok = false
	}
	if guestOK != *cuts {
		ok = false
	}
	if len(all) < *cuts*20 {
		fmt.Printf("  only %d publishes acknowledged: the test did not exercise the broker\n", len(all))
		ok = false
	}
	return ok
}

func (r *run) fail(err error, g *guest) bool {
	fmt.Println("powercut: FAIL:", err)
	if g != nil {
		if b, e := os.ReadFile(g.console); e == nil {
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			fmt.Println("--- guest console (last 40 lines)")
			fmt.Println(strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	}
	r.stopPub.Store(true)
	r.stopRecv.Store(true)
	return false
}

// publish sends QoS 1 messages one at a time (the next after the PUBACK),
// reconnecting whenever the connection breaks. A message counts as
// acknowledged only when its PUBACK arrived with a success code.
func (r *run) publish(p int) {
	defer r.pubWG.Done()
	next := uint64(p) << 32
	pad := make([]byte, 120)
	for !r.stopPub.Load() {
		c, err := dial(r.addr.Load().(string), fmt.Sprint("pub-", p), true)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for !r.stopPub.Load() {
			payload := append(binenc.BigEndian.AppendUint64(nil, next), pad...)
			m := packet.Publish{Topic: []byte(fmt.Sprintf("%s/%d", topic, p)), QoS: 1, PacketID: uint16(next%60000) + 1, Payload: payload}
			if c.write(m.Append(nil, packet.V5)) != nil {
				break
			}
			h, body, err := c.Read(10 * time.Second)
			if err != nil {
				break
			}
			var a packet.Ack
			if h.Type == packet.PUBACK && a.Decode(packet.V5, h.Type, body) == nil && !a.Reason.IsError() {
				r.ackedMu.Lock()
				r.acked = append(r.acked, next)
				r.ackedMu.Unlock()
			}
			next++
		}
		c.nc.Close()
	}
}

// receive keeps a persistent session connected, acknowledging every
// delivery, reconnecting whenever the connection breaks.
func (r *run) receive(id string) {
	defer r.recvWG.Done()
	tr := r.trackers[id]
	for !r.stopRecv.Load() {
		c, err := dial(r.addr.Load().(string), id, false)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for {
			h, body, err := c.Read(200 * time.Millisecond)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && !r.stopRecv.Load() {
					continue
				}
				break
			}
			if h.Type != packet.PUBLISH {
				continue
			}
			var p packet.Publish
			if p.Decode(packet.V5, h.Flags, body) != nil || len(p.Payload) < 8 {
				break
			}
			tr.add(binenc.BigEndian.Uint64(p.Payload))
			if c.write((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5)) != nil {
				break
			}
		}
		c.nc.Close()
	}
}

// hostCheck checks the image as cut i left it, on a copy: e2fsck replays
// the journal (as the guest kernel does when it mounts), then must find
// the file system clean; debugfs dumps linemq.db and the host's linemq
// checks it. It returns a one-line summary and whether all passed.
func hostCheck(i int) (string, bool) {
	cp := filepath.Join(*workDir, fmt.Sprintf("cut-%s-%d.img", *mode, i))
	defer os.Remove(cp)
	if err := copyFile(*image, cp); err != nil {
		return "copy: " + err.Error(), false
	}
	out, err := exec.Command("e2fsck", "-fy", cp).CombinedOutput()
	recovered := strings.Contains(string(out), "recovering journal")
	if code := exitCode(err); code > 1 {
		return fmt.Sprintf("e2fsck -fy exit %d: %s", code, lastLines(out, 5)), false
	}
	out, err = exec.Command("e2fsck", "-fn", cp).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("e2fsck -fn after recovery exit %d: %s", exitCode(err), lastLines(out, 5)), false
	}
	fs := "ext4 clean"
	if recovered {
		fs = "journal replayed, ext4 clean"
	}
	if *hostLinemq == "" {
		return fs + "; linemq db check skipped (no -linemq)", true
	}
	db := filepath.Join(*workDir, fmt.Sprintf("cut-%s-%d.db", *mode, i))
	defer os.Remove(db)
	if out, err := exec.Command("debugfs", "-R", "dump /linemq.db "+db, cp).CombinedOutput(); err != nil {
		return fmt.Sprintf("%s; debugfs dump: %v %s", fs, err, lastLines(out, 3)), false
	}
	fi, err := os.Stat(db)
	if err != nil {
		return fs + "; no linemq.db in the image", false
	}
	out, err = exec.Command(*hostLinemq, "db", "check", db).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s; linemq db check (%d bytes) exit %d: %s", fs, fi.Size(), exitCode(err), lastLines(out, 5)), false
	}
	return fmt.Sprintf("%s; linemq db check (%d bytes): %s", fs, fi.Size(), lastLines(out, 1)), true
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func lastLines(b []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// cutModel is what cut i (from 1) leaves on the disk.
func cutModel(i int) string {
	if *diskModel == "alternate" {
		if i%2 == 1 {
			return "flushed"
		}
		return "kill"
	}
	return *diskModel
}

// replayFlushed applies to base (the image as the boot found it) the writes
// blklogwrites logged up to the last flush it completed: the log's super
// block counts the entries at that flush, and every write the guest saw
// complete before it sent the flush is among them. It returns how many
// write entries the log holds in all and how many were applied.
//
// The log is in dm-log-writes' format, little-endian: a super block
// (magic, version, entries, sector size) in sector 0, then per entry one
// sector of header (sector, sectors, flags, data length) followed by the
// data's sectors (none for a flush or a discard).
func replayFlushed(base, logFile string) (total, applied int, err error) {
	const (
		magic       = 0x6a736677736872
		flagFlush   = 1
		flagDiscard = 4
	)
	lf, err := os.Open(logFile)
	if err != nil {
		return 0, 0, err
	}
	defer lf.Close()
	img, err := os.OpenFile(base, os.O_RDWR, 0)
	if err != nil {
		return 0, 0, err
	}
	defer img.Close()
	sb := make([]byte, 28)
	if _, err := lf.ReadAt(sb, 0); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, 0, nil // nothing was ever flushed (nor logged)
		}
		return 0, 0, err
	}
	le := binenc.LittleEndian
	if m := le.Uint64(sb); m != magic {
		if m == 0 {
			// No flush completed: the super block was never written.
			return countEntries(lf, 512), 0, nil
		}
		return 0, 0, fmt.Errorf("bad log magic %#x", m)
	}
	flushed := le.Uint64(sb[16:])
	ss := int64(le.Uint32(sb[24:]))
	hdr := make([]byte, 32)
	pos := int64(1)
	for i := uint64(0); i < flushed; i++ {
		if _, err := lf.ReadAt(hdr, pos*ss); err != nil {
			return 0, 0, fmt.Errorf("entry %d: %v", i, err)
		}
		pos++
		sector, n, flags := le.Uint64(hdr), int64(le.Uint64(hdr[8:])), le.Uint64(hdr[16:])
		if n == 0 && flags == 0 {
			// An entry counted but not yet written when QEMU died (a write
			// still in flight beside the flush; the guest had not seen it
			// complete). Its size is unknown, so the entries after it
			// cannot be found: they are dropped too, which can only make
			// the cut harsher than a real one (a false alarm, never a
			// false pass). It takes a kill within the flush's own
			// microseconds.
			break
		}
		if flags&(flagFlush|flagDiscard) != 0 {
			continue
		}
		data := make([]byte, n*ss)
		if _, err := lf.ReadAt(data, pos*ss); err != nil {
			return 0, 0, fmt.Errorf("entry %d data: %v", i, err)
		}
		if _, err := img.WriteAt(data, int64(sector)*ss); err != nil {
			return 0, 0, err
		}
		pos += n
		applied++
	}
	return applied + countEntriesFrom(lf, pos, ss), applied, img.Sync()
}

// countEntries counts the write entries of a log from its first entry.
func countEntries(lf *os.File, ss int64) int { return countEntriesFrom(lf, 1, ss) }

// countEntriesFrom counts the write entries from sector pos to the first
// empty header (entries after the last flush, which the cut discards).
func countEntriesFrom(lf *os.File, pos, ss int64) int {
	le := binenc.LittleEndian
	hdr := make([]byte, 32)
	n := 0
	for {
		if _, err := lf.ReadAt(hdr, pos*ss); err != nil {
			return n
		}
		sectors, flags := int64(le.Uint64(hdr[8:])), le.Uint64(hdr[16:])
		if sectors == 0 && flags == 0 {
			return n
		}
		pos++
		if flags&(1|4) == 0 {
			pos += sectors
			n++
		}
	}
}
