package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
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
	d := &daemon{cmd: exec.Command(binary, args...), exited: make(chan struct{})}
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

// TestConfigErrors checks that configuration problems exit 2 with the
// message alone on stderr, naming file, line and key (or the flag).
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.yaml")
	writeFile(t, unknown, "log_level: info\nmqtt:\n  recieve_maximum: 10\n")
	badValue := filepath.Join(dir, "bad.yaml")
	writeFile(t, badValue, "mqtt:\n  receive_maximum: 0\n")

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown key", []string{"-config", unknown}, unknown + `:3: unknown key "mqtt.recieve_maximum"`},
		{"bad value", []string{"-config", badValue}, badValue + `:2: mqtt.receive_maximum: 0 is not allowed (1..65535); leave the key out for the default (1024)`},
		{"bad flag value", []string{"-log-level", "loud"}, `flag -log-level: log_level: unknown level "loud" (valid: debug, info, warn, error)`},
		{"missing file", []string{"-config", filepath.Join(dir, "none.yaml")}, "open " + filepath.Join(dir, "none.yaml") + ": no such file or directory"},
		{"argument", []string{"serve"}, `linemq: unexpected argument "serve" (flags only; see -help)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := start(t, tt.args...)
			if code := d.exitCode(t, 5*time.Second); code != 2 {
				t.Errorf("exit status %d, want 2", code)
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

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
