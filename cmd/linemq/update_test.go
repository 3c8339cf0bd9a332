package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/gateway/update"
)

// TestUpdateTrial updates a gateway through its slots with real bundles
// and real processes, the test standing in for systemd: it starts linemq
// again when it exits (Restart=), and kills one that hangs, as WatchdogSec=
// would. In order, on one data directory (the last on another):
//   - a good bundle goes on trial, is committed after update.trial of
//     health, and runs from its slot at later starts;
//   - a bundle signed by another key is refused and changes nothing;
//   - a version that exits at start, and one that hangs, are each rolled
//     back to the committed version at the next start;
//   - a version stopped with SIGTERM during its trial is tried again at
//     the next start; killed (SIGKILL: a power cut) during its trial, it is
//     rolled back, and the version before delivers the messages it
//     accepted;
//   - a version whose storage check fails during its trial gives up (exit
//     1) and is rolled back with the reason.
func TestUpdateTrial(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second linemq and runs it")
	}
	dir := t.TempDir()
	newBin := filepath.Join(dir, "linemq-new")
	build := exec.Command("go", "build", "-o", newBin, "-ldflags", "-X main.version=v-new", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the new linemq: %v\n%s", err, out)
	}
	keys := filepath.Join(dir, "keys")
	os.Mkdir(keys, 0o755)
	priv, pub, _ := update.GenerateKey()
	writeFile(t, filepath.Join(keys, "plant.pub"), string(pub))
	strangerPriv, _, _ := update.GenerateKey()
	mkBundle := func(name string, signer []byte, version string, data []byte) string {
		t.Helper()
		k, err := update.ParsePrivateKey(signer)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := update.Write(&b, k, version, update.Arch(), time.Now(), []update.Source{{Name: "linemq", Mode: 0o755, Data: data}}); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		writeFile(t, p, b.String())
		return p
	}
	saveBundle := func(name string, b []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		writeFile(t, p, string(b))
		return p
	}
	data := filepath.Join(dir, "data")
	slots := &update.Slots{Dir: filepath.Join(data, update.Dir)}
	conf := func(trial string) string {
		p := filepath.Join(dir, "linemq-"+trial+".yaml")
		writeFile(t, p, "update:\n  keys_dir: "+keys+"\n  trial: "+trial+"\nhealth:\n  probe_interval: 500ms\n  probe_timeout: 400ms\n")
		return p
	}
	args := func(config string) []string {
		return []string{"-config", config, "-data-dir", data, "-mqtt-listen", "127.0.0.1:0", "-http-listen", "", "-node-id", "upd"}
	}
	apply := func(bundle string, want int) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run([]string{"update", "apply", "-keys", keys, "-data-dir", data, bundle}, &out, &errb); code != want {
			t.Fatalf("update apply %s: exit %d, want %d\n%s%s", bundle, code, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	state := func() *update.State {
		t.Helper()
		st, err := slots.Read()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	stop := func(d *daemon) {
		t.Helper()
		d.cmd.Process.Signal(syscall.SIGTERM)
		if code := d.exitCode(t, 10*time.Second); code != 0 {
			t.Fatalf("exit status %d after SIGTERM", code)
		}
	}
	line := func(s string) *regexp.Regexp { return regexp.MustCompile(s) }

	// A good version: on trial, committed, then in force.
	short := conf("2s")
	out := apply(saveBundle("good.bundle", bundleProgram(t, priv, "v-new", newBin)), 0)
	if !strings.Contains(out, "installed in slot a") {
		t.Errorf("apply said %q", out)
	}
	d := start(t, args(short)...)
	d.waitLine(t, line(`msg="linemq starting" version=v-new`), 20*time.Second)
	d.waitLine(t, line(`msg="update: on trial" version=v-new`), 20*time.Second)
	d.waitLine(t, line(`msg="update: committed`), 30*time.Second)
	stop(d)
	if st := state(); st.Committed != "a" || st.CommittedVersion != "v-new" || st.Trial != "" {
		t.Fatalf("after the trial: %+v", st)
	}
	d = start(t, args(short)...)
	d.waitLine(t, line(`msg="update: running the installed version" slot=a version=v-new`), 20*time.Second)
	d.waitLine(t, line(`msg=ready`), 20*time.Second)
	stop(d)

	// Signed by a key the gateway does not trust: refused, nothing changed.
	if out := apply(saveBundle("stranger.bundle", bundleProgram(t, strangerPriv, "v-evil", newBin)), 1); !strings.Contains(out, "signed by none of the 1 trusted keys") {
		t.Errorf("apply of a stranger's bundle said %q", out)
	}
	if st := state(); st.Trial != "" || st.Committed != "a" {
		t.Fatalf("a refused bundle changed the state: %+v", st)
	}

	// A version that exits at start, then one that hangs: each rolled back
	// at the start after.
	for _, tc := range []struct {
		version, script string
		hangs           bool
	}{
		{"v-crash", "#!/bin/sh\necho 'v-crash: exiting at start' >&2\nexit 3\n", false},
		{"v-hang", "#!/bin/sh\nexec sleep 600\n", true},
	} {
		apply(mkBundle(tc.version+".bundle", priv, tc.version, []byte(tc.script)), 0)
		d = start(t, args(short)...)
		if tc.hangs {
			// Started, and nothing more: no ready, no watchdog keepalive.
			// systemd would kill it after WatchdogSec (TimeoutStartSec for
			// a first start); so does the test, sooner.
			select {
			case <-d.exited:
				t.Fatalf("%s exited: %v", tc.version, d.cmd.ProcessState)
			case <-time.After(2 * time.Second):
			}
			d.cmd.Process.Kill()
			<-d.exited
		} else if code := d.exitCode(t, 20*time.Second); code != 3 {
			t.Fatalf("%s: exit status %d, want its 3", tc.version, code)
		}
		if st := state(); st.TrialVersion != tc.version || st.TrialStarts != 1 {
			t.Fatalf("%s: state %+v", tc.version, st)
		}
		d = start(t, args(short)...)
		d.waitLine(t, line(`msg="update: rolled back" version=`+tc.version+` reason="it stopped before its trial ended`), 20*time.Second)
		d.waitLine(t, line(`msg="update: running the installed version" slot=a version=v-new`), 20*time.Second)
		d.waitLine(t, line(`msg=ready`), 20*time.Second)
		stop(d)
		if st := state(); st.Trial != "" || st.Committed != "a" || st.LastRollback == nil || st.LastRollback.Version != tc.version {
			t.Fatalf("after %s: %+v", tc.version, st)
		}
	}

	// A power cut during a trial: the trial version accepts messages for a
	// persistent session, then dies; the version before comes back and
	// delivers them.
	// A stop on purpose (SIGTERM, as systemctl stop and a reboot send) is
	// no failure: the next start tries the version again.
	long := conf("1h")
	apply(saveBundle("cut.bundle", bundleProgram(t, priv, "v-cut", newBin)), 0)
	d = start(t, args(long)...)
	d.waitLine(t, line(`msg="update: on trial"`), 20*time.Second)
	stop(d)
	if st := state(); st.Trial != "b" || st.TrialStarts != 0 || st.LastRollback.Version != "v-hang" {
		t.Fatalf("after a stop during the trial: %+v", st)
	}
	d = start(t, args(long)...)
	addr := d.waitLine(t, listening, 20*time.Second)[1]
	d.waitLine(t, line(`msg="update: on trial"`), 20*time.Second)
	sub, _ := pahoClient(t, addr, "historian", false, nil)
	if _, err := sub.Subscribe(t.Context(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "line/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	sub.Disconnect(&paho.Disconnect{})
	pubc, _ := pahoClient(t, addr, "plc", true, nil)
	const n = 20
	for i := range n {
		if _, err := pubc.Publish(t.Context(), &paho.Publish{Topic: "line/m", QoS: 1, Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	d.cmd.Process.Kill()
	<-d.exited
	d = start(t, args(long)...)
	d.waitLine(t, line(`msg="update: rolled back" version=v-cut`), 20*time.Second)
	addr = d.waitLine(t, listening, 20*time.Second)[1]
	var mu sync.Mutex
	var got []byte
	sub, ca := pahoClient(t, addr, "historian", false, func(p *paho.Publish) {
		mu.Lock()
		got = append(got, p.Payload...)
		mu.Unlock()
	})
	if !ca.SessionPresent {
		t.Error("the session the trial version kept was not present after the rollback")
	}
	if !waitFor(10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= n }) {
		t.Fatalf("after the rollback the historian got %d of the %d messages the trial version acknowledged", len(got), n)
	}
	stop(d)

	// A version whose health fails during its trial gives up by itself:
	// on a fresh data directory (the image's version before it), with the
	// store bounded at 2 MiB and filled by an offline session's queue, the
	// storage check fails, the trial version exits 1 after three probes,
	// and the start after rolls it back with the reason.
	data = filepath.Join(dir, "data-full")
	slots.Dir = filepath.Join(data, update.Dir)
	full := filepath.Join(dir, "linemq-full.yaml")
	writeFile(t, full, "update:\n  keys_dir: "+keys+"\n  trial: 1h\nhealth:\n  probe_interval: 500ms\n  probe_timeout: 400ms\nstorage:\n  max_size: 2MiB\n")
	apply(saveBundle("full.bundle", bundleProgram(t, priv, "v-full", newBin)), 0)
	d = start(t, args(full)...)
	addr = d.waitLine(t, listening, 20*time.Second)[1]
	d.waitLine(t, line(`msg="update: on trial"`), 20*time.Second)
	sub, _ = pahoClient(t, addr, "historian", false, nil)
	if _, err := sub.Subscribe(t.Context(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "line/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	sub.Disconnect(&paho.Disconnect{})
	pubc, _ = pahoClient(t, addr, "filler", true, nil)
	big := bytes.Repeat([]byte("x"), 64<<10)
	refused := false
	for i := 0; i < 200 && !refused; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		r, err := pubc.Publish(ctx, &paho.Publish{Topic: "line/big", QoS: 1, Payload: big})
		cancel()
		refused = err != nil || (r != nil && r.ReasonCode >= 0x80)
	}
	if !refused {
		t.Fatal("200 messages of 64 KiB went into a store bounded at 2 MiB")
	}
	d.waitLine(t, line(`msg="update: giving up the trial;.* reason="unhealthy for .*storage`), 30*time.Second)
	if code := d.exitCode(t, 20*time.Second); code != 1 {
		t.Fatalf("the trial version that gave up exited %d, want 1 (for Restart=on-failure)", code)
	}
	d = start(t, args(full)...)
	d.waitLine(t, line(`msg="update: rolled back" version=v-full reason="unhealthy for`), 20*time.Second)
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.exitCode(t, 10*time.Second)
	st := state()
	if st.Trial != "" || st.Committed != "" || st.LastRollback == nil || !strings.Contains(st.LastRollback.Reason, "storage") {
		t.Fatalf("after the failed health: %+v", st)
	}
	t.Logf("last rollback: %+v", st.LastRollback)
}

// pahoClient connects an MQTT 5 client with a session of an hour; onMsg,
// if set, gets each message.
func pahoClient(t *testing.T, addr, id string, clean bool, onMsg func(*paho.Publish)) (*paho.Client, *paho.Connack) {
	t.Helper()
	return pahoClientAuth(t, addr, id, "", "", clean, onMsg)
}

// TestUpdateUpload installs a bundle through the HTTP API, as a plant's
// release tooling or an engineer with curl would: only a logged-in user of
// update.admins may, the bundle is verified as `linemq update apply` does,
// and the gateway then replaces itself with the new version in the same
// process (what systemd watches stays the same), which goes on trial; a
// persistent session's queued messages are there after the restart.
func TestUpdateUpload(t *testing.T) {
	if testing.Short() {
		t.Skip("runs linemq and restarts it into an update")
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	os.Mkdir(keys, 0o755)
	priv, pub, _ := update.GenerateKey()
	writeFile(t, filepath.Join(keys, "plant.pub"), string(pub))
	strangerPriv, _, _ := update.GenerateKey()
	var pw bytes.Buffer
	for _, u := range []string{"ops", "viewer", "plc"} {
		h, err := auth.NewHash([]byte(u+"-pw"), 10)
		if err != nil {
			t.Fatal(err)
		}
		pw.WriteString(u + ":" + h + "\n")
	}
	writeFile(t, filepath.Join(dir, "passwd"), pw.String())
	data := filepath.Join(dir, "data")
	conf := func(trial string) string {
		p := filepath.Join(dir, "linemq-"+trial+".yaml")
		writeFile(t, p, "auth:\n  password_file: "+filepath.Join(dir, "passwd")+"\n"+
			"update:\n  keys_dir: "+keys+"\n  trial: "+trial+"\n  admins: [ops]\n"+
			"health:\n  probe_interval: 500ms\n  probe_timeout: 400ms\n")
		return p
	}
	args := func(config string) []string {
		return []string{"-config", config, "-data-dir", data, "-mqtt-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0", "-node-id", "upd"}
	}
	call := func(method, url, user, contentType string, body []byte, v any) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth(user, user+"-pw")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		return resp.StatusCode
	}
	type status struct {
		Configured            bool          `json:"configured"`
		Version               string        `json:"version"`
		RunningIn             string        `json:"running_in"`
		Committed             string        `json:"committed"`
		Trial                 string        `json:"trial"`
		TrialRunning          bool          `json:"trial_running"`
		TrialRemainingSeconds float64       `json:"trial_remaining_seconds"`
		LastCommit            *update.Event `json:"last_commit"`
		Uploads               bool          `json:"uploads"`
	}
	var errBody struct{ Error string }
	const octets = "application/octet-stream"

	long := conf("1h")
	d := start(t, args(long)...)
	m := d.waitLine(t, readyAddrsRE, 20*time.Second)
	mqttAddr, api := m[1], "http://"+m[2]+"/api/v1/update"
	var st status
	if code := call("GET", api, "viewer", "", nil, &st); code != 200 || !st.Configured || st.RunningIn != "image" || !st.Uploads || st.Trial != "" {
		t.Fatalf("GET /api/v1/update: %d %+v", code, st)
	}

	// A persistent session with messages queued, to find after the
	// restart.
	sub, _ := pahoClientAuth(t, mqttAddr, "historian", "plc", "plc-pw", false, nil)
	if _, err := sub.Subscribe(t.Context(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "line/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	sub.Disconnect(&paho.Disconnect{})
	pubc, _ := pahoClientAuth(t, mqttAddr, "plc", "plc", "plc-pw", true, nil)
	const n = 10
	for i := range n {
		if _, err := pubc.Publish(t.Context(), &paho.Publish{Topic: "line/m", QoS: 1, Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}

	// Refusals, each changing nothing.
	good := bundleSelf(t, priv, "v-up")
	for _, tc := range []struct {
		name, user, ctype string
		body              []byte
		code              int
		want              string
	}{
		{"not an admin", "viewer", octets, good, 403, `user "viewer" is not one of update.admins`},
		{"a form", "ops", "application/x-www-form-urlencoded", good, 415, "application/octet-stream"},
		{"a stranger's key", "ops", octets, bundleSelf(t, strangerPriv, "v-evil"), 422, "signed by none of the 1 trusted keys"},
		{"cut short", "ops", octets, good[:len(good)/2], 422, "truncated"},
	} {
		errBody.Error = ""
		if code := call("POST", api, tc.user, tc.ctype, tc.body, &errBody); code != tc.code || !strings.Contains(errBody.Error, tc.want) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, code, errBody.Error, tc.code, tc.want)
		}
	}
	if st, err := (&update.Slots{Dir: filepath.Join(data, update.Dir)}).Read(); err != nil || st.Trial != "" {
		t.Fatalf("after the refusals: %+v %v", st, err)
	}

	// The good bundle: installed, then the same process restarts into it.
	var res struct {
		Version, Slot string
		Restarting    bool
		SignedBy      string `json:"signed_by"`
	}
	if code := call("POST", api, "ops", octets, good, &res); code != 200 || res.Version != "v-up" || res.Slot != "a" || !res.Restarting || res.SignedBy != "plant" {
		t.Fatalf("upload: %d %+v", code, res)
	}
	d.waitLine(t, regexp.MustCompile(`msg="update: restarting into the uploaded version"`), 20*time.Second)
	d.waitLine(t, regexp.MustCompile(`msg="update: running the installed version" slot=a`), 20*time.Second)
	m = d.waitLine(t, readyAddrsRE, 20*time.Second)
	mqttAddr, api = m[1], "http://"+m[2]+"/api/v1/update"
	select {
	case <-d.exited:
		t.Fatalf("the process exited instead of replacing itself: %v", d.cmd.ProcessState)
	default:
	}
	if code := call("GET", api, "viewer", "", nil, &st); code != 200 || st.RunningIn != "slot a" || !st.TrialRunning || st.TrialRemainingSeconds <= 0 || st.TrialRemainingSeconds > 3600 {
		t.Fatalf("GET during the trial: %d %+v", code, st)
	}
	if code := call("POST", api, "ops", octets, good, &errBody); code != 409 || !strings.Contains(errBody.Error, "is on trial since") {
		t.Errorf("an upload during the trial: %d %q", code, errBody.Error)
	}
	var mu sync.Mutex
	var got []byte
	_, ca := pahoClientAuth(t, mqttAddr, "historian", "plc", "plc-pw", false, func(p *paho.Publish) {
		mu.Lock()
		got = append(got, p.Payload...)
		mu.Unlock()
	})
	if !ca.SessionPresent {
		t.Error("the session was not present after the restart into the update")
	}
	if !waitFor(10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= n }) {
		t.Fatalf("after the restart the historian got %d of its %d queued messages", len(got), n)
	}

	// Stopped during the trial and started with a short one: committed.
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.exitCode(t, 10*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
	d = start(t, args(conf("2s"))...)
	m = d.waitLine(t, readyAddrsRE, 20*time.Second)
	d.waitLine(t, regexp.MustCompile(`msg="update: committed`), 30*time.Second)
	st = status{} // what the answer leaves out must read as empty
	if code := call("GET", "http://"+m[2]+"/api/v1/update", "viewer", "", nil, &st); code != 200 || st.Committed != "v-up (slot a)" || st.Trial != "" || st.LastCommit == nil || st.LastCommit.Version != "v-up" {
		t.Fatalf("after the commit: %d %+v", code, st)
	}
}

// pahoClientAuth is pahoClient with a user name and password ("" for
// none).
func pahoClientAuth(t *testing.T, addr, id, user, password string, clean bool, onMsg func(*paho.Publish)) (*paho.Client, *paho.Connack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := paho.ClientConfig{Conn: conn, OnClientError: func(error) {}}
	if onMsg != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			onMsg(pr.Packet)
			return true, nil
		}}
	}
	c := paho.NewClient(cfg)
	expiry := uint32(3600)
	cp := &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: clean, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}
	if user != "" {
		cp.Username, cp.UsernameFlag, cp.Password, cp.PasswordFlag = user, true, []byte(password), true
	}
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Disconnect(&paho.Disconnect{})
		<-c.Done()
	})
	return c, ca
}
