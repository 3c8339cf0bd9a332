package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/gateway/auth"
)

// passwd runs `linemq passwd args` with stdin and returns its status and
// output.
func passwd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runPasswd(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// login checks user and password against file as the broker would.
func login(t *testing.T, file, user, pw string) packet.ReasonCode {
	t.Helper()
	a, err := auth.New(auth.Config{PasswordFile: file}, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return a.Authenticate(context.Background(), broker.ConnectRequest{
		ClientInfo: broker.ClientInfo{ClientID: "c", Username: user, RemoteAddr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}},
		Password:   []byte(pw),
	})
}

func TestPasswdAddChangeDelete(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "passwd")
	if code, out, errOut := passwd(t, "first pw\n", "-c", "-stdin", file, "plc-1"); code != 0 || !strings.Contains(out, "added plc-1") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("new file mode %v, want 0600", fi.Mode().Perm())
	}
	if rc := login(t, file, "plc-1", "first pw"); rc != packet.Success {
		t.Fatalf("login: %v", rc)
	}
	data, _ := os.ReadFile(file)
	if !strings.HasPrefix(string(data), "plc-1:$7$1000$") {
		t.Errorf("line %q", data)
	}

	// Other lines, comments included, are kept; the mode too.
	keep := "# plant users\nold-hmi:$6$vjFJP6fwp0ZR3x2o$Q95xHW7cMUJy5T/NkKr/uvpm3MfFsntzNtU8ravBhltl7lX7pv1Q+EAuQlCqIwbMpSjWrtRBcZbB29rkj+kjWQ==\n"
	os.WriteFile(file, append([]byte(keep), data...), 0o640)
	os.Chmod(file, 0o640)
	if code, out, errOut := passwd(t, "second pw\r\n", "-stdin", file, "plc-1"); code != 0 || !strings.Contains(out, "changed the password of plc-1") {
		t.Fatalf("change: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := passwd(t, "x y z", "-stdin", "-iterations", "101", file, "line 3"); code != 0 {
		t.Fatalf("add: %s", errOut)
	}
	data, _ = os.ReadFile(file)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 4 || lines[0] != "# plant users" || !strings.HasPrefix(lines[1], "old-hmi:$6$") ||
		!strings.HasPrefix(lines[2], "plc-1:$7$") || !strings.HasPrefix(lines[3], "line 3:$7$101$") {
		t.Errorf("file:\n%s", data)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v not kept", fi.Mode().Perm())
	}
	for user, pw := range map[string]string{"plc-1": "second pw", "old-hmi": "hunter2", "line 3": "x y z"} {
		if rc := login(t, file, user, pw); rc != packet.Success {
			t.Errorf("%s: %v", user, rc)
		}
	}
	if rc := login(t, file, "plc-1", "first pw"); rc != packet.BadUsernameOrPassword {
		t.Errorf("old password: %v", rc)
	}

	if code, out, _ := passwd(t, "", "-D", file, "plc-1"); code != 0 || !strings.Contains(out, "deleted plc-1") {
		t.Fatalf("delete: %d %q", code, out)
	}
	if rc := login(t, file, "plc-1", "second pw"); rc != packet.BadUsernameOrPassword {
		t.Errorf("deleted user: %v", rc)
	}
	if code, _, errOut := passwd(t, "", "-D", file, "plc-1"); code != 1 || !strings.Contains(errOut, `user "plc-1" is not in`) {
		t.Errorf("delete again: %d %q", code, errOut)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".passwd.tmp*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestPasswdErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "passwd")
	for _, tc := range []struct {
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"pw", []string{"-stdin", file, "u"}, 1, "does not exist (-c creates it)"},
		{"pw", []string{"-stdin", file}, 2, "want FILE and USER"},
		{"pw", []string{"-c", "-stdin", file, "a:b"}, 2, "contains ':'"},
		{"pw", []string{"-c", "-stdin", file, ""}, 2, "empty user name"},
		{"\n", []string{"-c", "-stdin", file, "u"}, 1, "empty password"},
		{"pw", []string{"-c", file, "u"}, 1, "not a terminal: give the password on it with -stdin"},
		{"pw", []string{"-c", "-D", file, "u"}, 2, "-c and -D"},
		{"pw", []string{"-c", "-stdin", "-iterations", "0", file, "u"}, 2, "out of range"},
		{"pw", []string{"-c", "-stdin", dir, "u"}, 1, "is a directory"},
		{strings.Repeat("x", 5000), []string{"-c", "-stdin", file, "u"}, 1, "longer than 4096"},
	} {
		code, _, errOut := passwd(t, tc.stdin, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: status %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(file); err == nil {
		t.Error("a failed command wrote the file")
	}
	if code, _, errOut := passwd(t, "", "-h"); code != 0 || !strings.Contains(errOut, "Usage: linemq passwd") {
		t.Errorf("-h: %d %q", code, errOut)
	}
}

// TestPasswdMosquittoReadsIt runs Mosquitto itself on a file written by
// linemq passwd and logs in with mosquitto_pub: the $7$ lines are
// Mosquitto's own format, not just something linemq can read back.
func TestPasswdMosquittoReadsIt(t *testing.T) {
	mosq, err1 := exec.LookPath("mosquitto")
	pub, err2 := exec.LookPath("mosquitto_pub")
	if err1 != nil || err2 != nil {
		t.Skip("mosquitto or mosquitto_pub not installed (apt-get install mosquitto mosquitto-clients); CI installs them")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "passwd")
	if code, _, errOut := passwd(t, "s3cret w0rd\n", "-c", "-stdin", file, "plc-1"); code != 0 {
		t.Fatal(errOut)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous false\npassword_file %s\n", port, file)
	if os.Geteuid() == 0 {
		conf += "user root\n" // do not drop to a user that cannot read t.TempDir()
	}
	confFile := filepath.Join(dir, "mosquitto.conf")
	os.WriteFile(confFile, []byte(conf), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var log bytes.Buffer
	m := exec.CommandContext(ctx, mosq, "-c", confFile)
	m.Stdout, m.Stderr = &log, &log
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		m.Process.Kill()
		m.Wait()
		t.Logf("mosquitto:\n%s", log.String())
	}()
	var dialErr error
	if !waitFor(10*time.Second, func() bool {
		var c net.Conn
		if c, dialErr = net.DialTimeout("tcp", l.Addr().String(), time.Second); dialErr == nil {
			c.Close()
		}
		return dialErr == nil
	}) {
		t.Fatalf("mosquitto did not start listening: %v", dialErr)
	}
	run := func(pw string) error {
		out, err := exec.CommandContext(ctx, pub, "-h", "127.0.0.1", "-p", fmt.Sprint(port),
			"-u", "plc-1", "-P", pw, "-t", "t", "-m", "x", "-q", "1").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := run("s3cret w0rd"); err != nil {
		t.Errorf("mosquitto refused the right password: %v", err)
	}
	if err := run("s3cret"); err == nil {
		t.Error("mosquitto accepted a wrong password")
	}
}
