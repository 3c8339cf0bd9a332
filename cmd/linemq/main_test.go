package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/storage/bolt"
)

// testVersion is stamped into the binary the tests run, to check -ldflags
// -X main.version end to end.
const testVersion = "v0.0.0-test"

// binary is the linemq executable built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "linemq-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		binary = filepath.Join(dir, "linemq")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		build := exec.CommandContext(ctx, "go", "build", "-o", binary, "-ldflags", "-X main.version="+testVersion, ".")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building linemq: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// daemon is a running linemq process.
type daemon struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr lineWriter
	exited chan struct{} // closed when the process has exited and its output is read
}

// start runs the binary with args; the test kills it at the end if it is
// still running.
func start(t *testing.T, args ...string) *daemon {
	t.Helper()
	return startProgram(t, binary, args...)
}

// startProgram is start with another linemq build: an older one, which a
// test then updates.
func startProgram(t *testing.T, program string, args ...string) *daemon {
	t.Helper()
	d := &daemon{cmd: exec.Command(program, args...), exited: make(chan struct{})}
	d.stderr.lines = make(chan string, 1024)
	d.cmd.Stdout = &d.stdout
	d.cmd.Stderr = &d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			d.cmd.Process.Kill()
			<-d.exited
		}
		if t.Failed() {
			t.Logf("linemq stderr:\n%s", d.stderr.String())
		}
	})
	return d
}

// exitCode waits at most timeout for the process to exit and returns its
// exit status.
func (d *daemon) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-d.exited:
		return d.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("linemq still running after %v", timeout)
		return -1
	}
}

// waitLine returns the submatches of the first stderr line matching re,
// failing the test if none arrives within timeout or the process exits
// first.
func (d *daemon) waitLine(t *testing.T, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-d.stderr.lines:
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-d.exited:
			// Every line the process wrote is in the channel by now.
			for {
				select {
				case l := <-d.stderr.lines:
					if m := re.FindStringSubmatch(l); m != nil {
						return m
					}
					continue
				default:
				}
				t.Fatalf("linemq exited (%v) before logging a line matching %s", d.cmd.ProcessState, re)
			}
		case <-deadline:
			t.Fatalf("no stderr line matching %s within %v", re, timeout)
		}
	}
}

// lineWriter keeps everything written to it and passes on each complete
// line.
type lineWriter struct {
	mu      sync.Mutex
	all     bytes.Buffer
	partial []byte
	lines   chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		select {
		case w.lines <- string(w.partial[:i]):
		default: // nobody is waiting for lines this far on; String has them
		}
		w.partial = w.partial[i+1:]
	}
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

var listening = regexp.MustCompile(`msg=listening proto=mqtt addr=(\S+)`)

// TestSIGTERM runs the daemon as a service manager would, connects a v5
// client, and stops the daemon with SIGTERM: the client must be told the
// server is shutting down and the process must exit 0 within 5 s.
func TestSIGTERM(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "linemq.yaml")
	// node_id comes from the file; mqtt.listen from the file is overridden
	// by the flag (port 1 could not be bound).
	writeFile(t, cfgFile, "node_id: gw-test\nmqtt:\n  listen: 127.0.0.1:1\n")
	d := start(t,
		"-config", cfgFile,
		"-mqtt-listen", "127.0.0.1:0",
		"-http-listen", "",
		"-data-dir", filepath.Join(dir, "data"),
	)
	addr := d.waitLine(t, listening, 10*time.Second)[1]
	d.waitLine(t, regexp.MustCompile(`msg="gateway started" node_id=gw-test `), 5*time.Second)
	if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
		t.Errorf("data directory: %v", err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	disconnects := make(chan *paho.Disconnect, 1)
	c := paho.NewClient(paho.ClientConfig{
		Conn:               conn,
		OnServerDisconnect: func(p *paho.Disconnect) { disconnects <- p },
		OnClientError:      func(error) {},
	})
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: "sigterm-test", KeepAlive: 30, CleanStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if ca.ReasonCode != 0 {
		t.Fatalf("CONNACK reason %#x", ca.ReasonCode)
	}
	defer func() {
		c.Disconnect(&paho.Disconnect{}) // fails harmlessly: the server has gone
		<-c.Done()
	}()

	sent := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-disconnects:
		if p.ReasonCode != 0x8B {
			t.Errorf("DISCONNECT reason %#x, want 0x8B Server shutting down", p.ReasonCode)
		}
	case <-time.After(5 * time.Second):
		t.Error("no DISCONNECT within 5s of SIGTERM")
	}
	if code := d.exitCode(t, 5*time.Second-time.Since(sent)); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	if !strings.Contains(d.stderr.String(), `msg="linemq stopped"`) {
		t.Errorf("no \"linemq stopped\" record in stderr")
	}
}

// TestConfigErrors checks that configuration problems exit 78 (a bad
// command line 64) with the message alone on stderr, naming file, line and
// key (or the flag).
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.yaml")
	writeFile(t, unknown, "log_level: info\nmqtt:\n  recieve_maximum: 10\n")
	badValue := filepath.Join(dir, "bad.yaml")
	writeFile(t, badValue, "mqtt:\n  receive_maximum: 0\n")

	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown key", []string{"-config", unknown}, exitConfig, unknown + `:3: unknown key "mqtt.recieve_maximum"; did you mean "mqtt.receive_maximum"?`},
		{"bad value", []string{"-config", badValue}, exitConfig, badValue + `:2: mqtt.receive_maximum: 0 is not allowed (1..65535); leave the key out for the default (1024)`},
		{"bad flag value", []string{"-log-level", "loud"}, exitConfig, `flag -log-level: log_level: unknown level "loud" (valid: debug, info, warn, error)`},
		{"missing file", []string{"-config", filepath.Join(dir, "none.yaml")}, exitConfig, "open " + filepath.Join(dir, "none.yaml") + ": no such file or directory"},
		{"argument", []string{"serve"}, exitUsage, `linemq: unexpected argument "serve" (flags only; see -help)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := start(t, tt.args...)
			if code := d.exitCode(t, 5*time.Second); code != tt.code {
				t.Errorf("exit status %d, want %d", code, tt.code)
			}
			if got := d.stderr.String(); got != tt.want+"\n" {
				t.Errorf("stderr\n got: %q\nwant: %q", got, tt.want+"\n")
			}
		})
	}
}

func TestVersion(t *testing.T) {
	d := start(t, "-version")
	if code := d.exitCode(t, 5*time.Second); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	want := fmt.Sprintf("linemq %s (%s %s/%s)\n", testVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if got := d.stdout.String(); got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
}

// TestConfigure checks, in process, that only the flags given override the
// file.
func TestConfigure(t *testing.T) {
	file := filepath.Join(t.TempDir(), "linemq.yaml")
	writeFile(t, file, "node_id: from-file\nlog_level: debug\ndata_dir: /file\nmqtt:\n  listen: 10.0.0.1:1883\n")
	fs, configFile, _ := newFlagSet(io.Discard)
	if err := fs.Parse([]string{"-config", file, "-data-dir", "/flag", "-http-listen", ""}); err != nil {
		t.Fatal(err)
	}
	cfg, err := configure(fs, *configFile)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeID != "from-file" || cfg.LogLevel != "debug" || *cfg.MQTT.Listen != "10.0.0.1:1883" {
		t.Errorf("file values lost: node_id %q, log_level %q, mqtt.listen %q", cfg.NodeID, cfg.LogLevel, *cfg.MQTT.Listen)
	}
	if cfg.DataDir != "/flag" || *cfg.HTTP.Listen != "" {
		t.Errorf("flags not applied: data_dir %q, http.listen %q", cfg.DataDir, *cfg.HTTP.Listen)
	}

	// Without a file, flags apply over the defaults.
	fs, configFile, _ = newFlagSet(io.Discard)
	if err := fs.Parse([]string{"-node-id", "gw-9"}); err != nil {
		t.Fatal(err)
	}
	if cfg, err = configure(fs, *configFile); err != nil {
		t.Fatal(err)
	}
	if cfg.NodeID != "gw-9" || *cfg.MQTT.Listen != ":1883" || cfg.DataDir != "./data" {
		t.Errorf("config = %+v", cfg)
	}

	// -etcd-endpoints takes one URL or a comma-separated list, as
	// docs/cluster.md shows (issue 21: it exited 2, "not a single value").
	for _, tc := range []struct {
		arg  string
		want []string
	}{
		{"http://127.0.0.1:2379", []string{"http://127.0.0.1:2379"}},
		{"http://10.0.0.5:2379, http://10.0.0.6:2379,", []string{"http://10.0.0.5:2379", "http://10.0.0.6:2379"}},
	} {
		fs, configFile, _ = newFlagSet(io.Discard)
		if err := fs.Parse([]string{"-node-id", "gw1", "-cluster-listen", "127.0.0.1:7946", "-etcd-endpoints", tc.arg}); err != nil {
			t.Fatal(err)
		}
		if cfg, err = configure(fs, *configFile); err != nil {
			t.Fatalf("-etcd-endpoints %q: %v", tc.arg, err)
		}
		if !slices.Equal(cfg.Cluster.Etcd.Endpoints, tc.want) {
			t.Errorf("-etcd-endpoints %q: cluster.etcd.endpoints = %q, want %q", tc.arg, cfg.Cluster.Etcd.Endpoints, tc.want)
		}
	}

	// Every configuration flag maps to a key, and every key a flag.
	fs, _, _ = newFlagSet(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := flagKeys[f.Name]; !ok && f.Name != "config" && f.Name != "version" {
			t.Errorf("flag -%s overrides no key", f.Name)
		}
	})
	for name := range flagKeys {
		if fs.Lookup(name) == nil {
			t.Errorf("flagKeys has %q, which is not a flag", name)
		}
	}
}

// TestLogFormatJSON runs the daemon with -log-format json: every line on
// stderr is a JSON object, and the "listening" record carries the address.
func TestLogFormatJSON(t *testing.T) {
	dir := t.TempDir()
	d := start(t, "-log-format", "json", "-mqtt-listen", "127.0.0.1:0", "-http-listen", "", "-data-dir", filepath.Join(dir, "data"))
	line := d.waitLine(t, regexp.MustCompile(`^\{.*"msg":"listening".*$`), 10*time.Second)[0]
	var rec struct{ Level, Msg, Proto, Addr string }
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if rec.Level != "INFO" || rec.Proto != "mqtt" || !strings.HasPrefix(rec.Addr, "127.0.0.1:") {
		t.Errorf("listening record = %+v", rec)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.exitCode(t, 5*time.Second); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	for l := range strings.Lines(d.stderr.String()) {
		if !json.Valid([]byte(l)) {
			t.Errorf("not a JSON line: %q", l)
		}
	}
}

// TestHelp checks that linemq -h names the db subcommands and that
// linemq db -h prints their usage, both exiting 0.
func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"-h"}, 0, []string{"Usage:", "linemq [-config FILE]", "linemq db check|compact", "linemq db -h", "-log-format"}},
		{[]string{"db", "-h"}, 0, []string{"Usage: linemq db check|compact [-data-dir DIR] [FILE]", "check ", "compact ", "-data-dir"}},
		{[]string{"db", "--help"}, 0, []string{"Usage: linemq db check|compact"}},
		{[]string{"db", "help"}, 0, []string{"Usage: linemq db check|compact"}},
		{[]string{"db", "check", "-h"}, 0, []string{"Usage: linemq db check|compact"}},
		{[]string{"db"}, 2, []string{"Usage: linemq db check|compact"}},
		{[]string{"db", "repair"}, 2, []string{`linemq db: unknown command "repair" (check or compact; see linemq db -h)`}},
		{[]string{"db", "check", "a", "b"}, 2, []string{"linemq db check: one FILE at most"}},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		if code := run(tt.args, &stdout, &stderr); code != tt.code {
			t.Errorf("%q: exit status %d, want %d", tt.args, code, tt.code)
		}
		for _, w := range tt.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%q: output lacks %q:\n%s", tt.args, w, stderr.String())
			}
		}
	}
}

// TestDBCheck runs linemq db check and compact on a sound database and on
// damaged ones. A damaged file gets a list of plain problems, never a
// bbolt panic text, and advice that names the file and is not to run the
// check that just ran.
func TestDBCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, gateway.DBFile)
	s, err := bolt.Open(good, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		// Enough records over enough pages for the corruptions below to hit
		// branch, leaf and overflow pages.
		m := broker.NewMessage(fmt.Sprintf("site/%d/line/%d", i%7, i), bytes.Repeat([]byte{byte(i)}, 300+i%5000), 1, true)
		if err := s.SaveRetained(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"db", "-data-dir", dir, "check"}, &stdout, &stderr); code != 0 || stdout.String() != good+": ok\n" {
		t.Fatalf("check of a sound file: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"db", "compact", "-data-dir", dir}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), good+": ") {
		t.Fatalf("compact of a sound file: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}

	const page = 4096
	rnd := rand.New(rand.NewPCG(5, 6))
	damage := map[string]func([]byte) []byte{
		"garbage": func(b []byte) []byte {
			for i := range b {
				b[i] = byte(rnd.Uint32())
			}
			return b
		},
		"random pages": func(b []byte) []byte { // bbolt asserts on a page id
			for i := 2 * page; i < len(b)/2; i++ {
				b[i] = byte(rnd.Uint32())
			}
			return b
		},
		"garbled records": func(b []byte) []byte { // bbolt indexes out of range
			for p := 2; p < len(b)/page; p++ {
				for i := p*page + 600; i < p*page+700; i++ {
					b[i] ^= 0x5a
				}
			}
			return b
		},
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "copy.db")
			writeFile(t, file, string(f(append([]byte(nil), orig...))))
			var stdout, stderr bytes.Buffer
			if code := run([]string{"db", "check", file}, &stdout, &stderr); code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			out := stderr.String()
			defer func() {
				if t.Failed() {
					t.Logf("output:\n%s", out)
				}
			}()
			for _, want := range []string{"linemq db check: " + file + " is damaged (", "\n  - ", "restore a backup of " + file, "move it away"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q", want)
				}
			}
			for _, bad := range []string{"linemq db check " + file, "panic", "runtime error", "assertion", "goroutine"} {
				if strings.Contains(out, bad) {
					t.Errorf("output has %q", bad)
				}
			}
		})
	}

	for _, tt := range []struct{ args []string }{
		{[]string{"db", "check", dir}},
		{[]string{"db", "compact", dir}},
	} {
		stderr.Reset()
		want := fmt.Sprintf("%s is a directory: give the database file (%s)", dir, good)
		if code := run(tt.args, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%q: exit %d, %q; want 1 and %q", tt.args, code, stderr.String(), want)
		}
	}
	stderr.Reset()
	missing := filepath.Join(dir, "none.db")
	if code := run([]string{"db", "check", missing}, io.Discard, &stderr); code != 1 || stderr.String() != "linemq db check: stat "+missing+": no such file or directory\n" {
		t.Errorf("missing file: exit %d, %q", code, stderr.String())
	}
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
