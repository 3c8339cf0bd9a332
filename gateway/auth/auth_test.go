package auth

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func testLogger() (*slog.Logger, *syncBuffer) {
	var b syncBuffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

// writeFile writes a file in dir and returns its path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func tcp(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }

// certAddr is a remote address carrying a certificate identity, as
// gateway/listen's PeerAddr does.
type certAddr struct {
	net.Addr
	id string
}

func (a certAddr) Identity() string { return a.id }
func (a certAddr) Unwrap() net.Addr { return a.Addr }
func connect(user, pw, ip string) broker.ConnectRequest {
	return broker.ConnectRequest{
		ClientInfo: broker.ClientInfo{ClientID: "c-" + user, Username: user, RemoteAddr: tcp(ip), Version: packet.V5},
		Password:   []byte(pw),
	}
}

func newAuth(t *testing.T, cfg Config, opts Options) *Authenticator {
	t.Helper()
	a, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAuthenticateOutcomes(t *testing.T) {
	dir := t.TempDir()
	pwFile := writeFile(t, dir, "passwd", strings.Join([]string{mosqAlice, mosqBob, bcryptLine(t, "carol", "pa:ss", "$2y$")}, "\n"))
	yes, no := true, false
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  Config
		req  broker.ConnectRequest
		want packet.ReasonCode
	}{
		// The safe default: no authentication configured.
		{"default, anonymous, loopback v4", Config{}, connect("", "", "127.0.0.1"), packet.Success},
		{"default, anonymous, loopback v6", Config{}, connect("", "", "::1"), packet.Success},
		{"default, anonymous, 127.5.5.5", Config{}, connect("", "", "127.5.5.5"), packet.Success},
		{"default, anonymous, unix socket", Config{}, broker.ConnectRequest{ClientInfo: broker.ClientInfo{RemoteAddr: &net.UnixAddr{Name: "@x", Net: "unix"}}}, packet.Success},
		{"default, anonymous, plant network", Config{}, connect("", "", "10.1.2.3"), packet.NotAuthorized},
		{"default, anonymous, mapped v4", Config{}, connect("", "", "::ffff:10.1.2.3"), packet.NotAuthorized},
		{"default, no address", Config{}, broker.ConnectRequest{}, packet.NotAuthorized},
		{"default, a user name proves nothing", Config{}, connect("alice", "x", "10.1.2.3"), packet.NotAuthorized},
		{"allow_anonymous true", Config{AllowAnonymous: &yes}, connect("", "", "10.1.2.3"), packet.Success},
		{"allow_anonymous false, even loopback", Config{AllowAnonymous: &no}, connect("", "", "127.0.0.1"), packet.NotAuthorized},
		// A password file.
		{"$7$ good", Config{PasswordFile: pwFile}, connect("alice", "s3cret pass", "10.1.2.3"), packet.Success},
		{"$7$ bad", Config{PasswordFile: pwFile}, connect("alice", "s3cret", "10.1.2.3"), packet.BadUsernameOrPassword},
		{"$6$ good", Config{PasswordFile: pwFile}, connect("bob", "hunter2", "10.1.2.4"), packet.Success},
		{"$6$ bad", Config{PasswordFile: pwFile}, connect("bob", "hunter3", "10.1.2.4"), packet.BadUsernameOrPassword},
		{"bcrypt good", Config{PasswordFile: pwFile}, connect("carol", "pa:ss", "10.1.2.5"), packet.Success},
		{"bcrypt bad", Config{PasswordFile: pwFile}, connect("carol", "pa", "10.1.2.5"), packet.BadUsernameOrPassword},
		{"unknown user", Config{PasswordFile: pwFile}, connect("mallory", "s3cret pass", "10.1.2.6"), packet.BadUsernameOrPassword},
		{"no password", Config{PasswordFile: pwFile}, connect("alice", "", "10.1.2.6"), packet.BadUsernameOrPassword},
		{"password file: anonymous refused on loopback", Config{PasswordFile: pwFile}, connect("", "", "127.0.0.1"), packet.NotAuthorized},
		{"password file: password without user is anonymous", Config{PasswordFile: pwFile}, connect("", "s3cret pass", "127.0.0.1"), packet.NotAuthorized},
		{"password file + allow_anonymous", Config{PasswordFile: pwFile, AllowAnonymous: &yes}, connect("", "", "10.1.2.3"), packet.Success},
		{"password file + allow_anonymous, wrong password still refused", Config{PasswordFile: pwFile, AllowAnonymous: &yes}, connect("alice", "x", "10.1.2.3"), packet.BadUsernameOrPassword},
		// A certificate identity needs no password.
		{"certificate", Config{PasswordFile: pwFile, AllowAnonymous: &no}, broker.ConnectRequest{ClientInfo: broker.ClientInfo{RemoteAddr: certAddr{tcp("10.9.9.9"), "plc-7"}}}, packet.Success},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAuth(t, tc.cfg, Options{})
			if got := a.Authenticate(ctx, tc.req); got != tc.want {
				t.Errorf("%v (0x%02X), want %v (0x%02X)", got, byte(got), tc.want, byte(tc.want))
			}
		})
	}
}

// TestV3ConnackCodes pins the 3.1.1 return codes the encoder sends for the
// refusals above (MQTT 3.1.1 section 3.2.2.3).
func TestV3ConnackCodes(t *testing.T) {
	for rc, want := range map[packet.ReasonCode]byte{
		packet.BadUsernameOrPassword:  0x04,
		packet.NotAuthorized:          0x05,
		packet.ConnectionRateExceeded: 0x03,
		packet.ServerBusy:             0x03,
	} {
		if got := rc.V3ConnackCode(); got != want {
			t.Errorf("%v: 3.1.1 code 0x%02X, want 0x%02X", rc, got, want)
		}
		b := (&packet.Connack{Reason: rc}).Append(nil, packet.V311)
		if len(b) != 4 || b[3] != want {
			t.Errorf("%v: encoded 3.1.1 CONNACK % X, want return code 0x%02X", rc, b, want)
		}
	}
}

func TestAnonymousHintLoggedOnce(t *testing.T) {
	log, buf := testLogger()
	a := newAuth(t, Config{}, Options{Logger: log})
	for range 3 {
		a.Authenticate(context.Background(), connect("", "", "10.1.2.3"))
	}
	out := buf.String()
	if n := strings.Count(out, "anonymous client refused"); n != 1 {
		t.Fatalf("hint logged %d times:\n%s", n, out)
	}
	for _, s := range []string{"auth.allow_anonymous: true", "linemq passwd", "auth.password_file", "addr=10.1.2.3:40000"} {
		if !strings.Contains(out, s) {
			t.Errorf("hint does not mention %q:\n%s", s, out)
		}
	}
}

// TestFailureDelay checks the throttle through Authenticate: after the
// free failures an address waits, a crowd of attempts is queued rather
// than checked at once, and one past the client's patience is refused
// unchecked.
func TestFailureDelay(t *testing.T) {
	const (
		delay = 200 * time.Millisecond // FailureDelay
		quick = 150 * time.Millisecond // an unthrottled check takes less, a throttled one more
	)
	dir := t.TempDir()
	pwFile := writeFile(t, dir, "passwd", mosqBob+"\n")
	a := newAuth(t, Config{PasswordFile: pwFile}, Options{FreeFailures: 2, FailureDelay: delay, MaxFailureDelay: 2 * delay})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	timed := func(c context.Context, req broker.ConnectRequest) (packet.ReasonCode, time.Duration) {
		start := time.Now()
		rc := a.Authenticate(c, req)
		return rc, time.Since(start)
	}
	bad := connect("bob", "wrong", "10.7.7.7")
	for range 2 {
		if rc, d := timed(ctx, bad); rc != packet.BadUsernameOrPassword || d > quick {
			t.Fatalf("a free failure: %v after %v", rc, d)
		}
	}
	// FreeFailures means what it says: the check after them waits.
	if _, d := timed(ctx, bad); d < quick {
		t.Errorf("a check after 2 failures (FreeFailures 2) waited only %v", d)
	}
	// The right password is still accepted, late, and clears the address.
	if rc, _ := timed(ctx, connect("bob", "hunter2", "10.7.7.7")); rc != packet.Success {
		t.Fatalf("right password: %v", rc)
	}
	if _, d := timed(ctx, bad); d > quick {
		t.Errorf("after a success a failure still waited %v", d)
	}
	// Another address is not slowed by this one.
	for range 4 {
		a.Authenticate(ctx, bad)
	}
	if rc, d := timed(ctx, connect("bob", "wrong", "10.7.7.8")); rc != packet.BadUsernameOrPassword || d > quick {
		t.Errorf("another address: %v after %v", rc, d)
	}
	// A client that will not wait for its slot is refused at once, unchecked.
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if rc, _ := timed(short, connect("bob", "hunter2", "10.7.7.7")); rc != packet.ConnectionRateExceeded {
		t.Errorf("impatient attempt: %v, want connection rate exceeded", rc)
	}
	// Twenty at once, each willing to wait 1s, with slots 400ms apart: a
	// few are checked in turn, the rest refused unchecked, and none waits
	// past its patience.
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[packet.ReasonCode]int{}
	start := time.Now()
	for range 20 {
		wg.Go(func() {
			c, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			rc := a.Authenticate(c, bad)
			mu.Lock()
			codes[rc]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[packet.BadUsernameOrPassword] > 4 || codes[packet.ConnectionRateExceeded] < 16 {
		t.Errorf("20 concurrent attempts with 1s patience and 400ms slots: %v", codes)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("attempts took %v", d)
	}
}

// TestFreeFailuresAtOnce: FreeFailures wrong passwords from one address
// are checked, however many connections bring them at once; the others
// wait for a slot (an hour here) and are refused unchecked. A burst of
// right passwords from one address, an edge box reconnecting all its
// clients, is not held up: the first success clears the address.
func TestFreeFailuresAtOnce(t *testing.T) {
	dir := t.TempDir()
	pwFile := writeFile(t, dir, "passwd", mosqBob+"\n")
	a := newAuth(t, Config{PasswordFile: pwFile}, Options{FreeFailures: 3, FailureDelay: time.Hour, MaxFailureDelay: time.Hour})
	burst := func(req broker.ConnectRequest) map[packet.ReasonCode]int {
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[packet.ReasonCode]int{}
		for range 12 {
			wg.Go(func() {
				c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				rc := a.Authenticate(c, req)
				mu.Lock()
				codes[rc]++
				mu.Unlock()
			})
		}
		wg.Wait()
		return codes
	}
	if got := burst(connect("bob", "wrong", "10.8.8.8")); got[packet.BadUsernameOrPassword] != 3 || got[packet.ConnectionRateExceeded] != 9 {
		t.Errorf("12 wrong passwords at once: %v, want 3 checked and 9 refused", got)
	}
	if got := burst(connect("bob", "hunter2", "10.8.8.9")); got[packet.Success] != 12 {
		t.Errorf("12 right passwords at once: %v, want all accepted", got)
	}
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	pwFile := writeFile(t, dir, "passwd", mosqAlice+"\n")
	aclFile := writeFile(t, dir, "acl", "user alice\ntopic readwrite a/#\n")
	log, buf := testLogger()
	a := newAuth(t, Config{PasswordFile: pwFile, ACLFile: aclFile}, Options{Logger: log})
	alice := broker.ClientInfo{ClientID: "x", Username: "alice", RemoteAddr: tcp("10.0.0.1")}
	ctx := context.Background()
	if !a.CanPublish(alice, "a/1") || a.CanPublish(alice, "b/1") {
		t.Fatal("rules before reload")
	}

	writeFile(t, dir, "passwd", mosqBob+"\n")
	writeFile(t, dir, "acl", "user alice\ntopic readwrite b/#\n")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if a.CanPublish(alice, "a/1") || !a.CanPublish(alice, "b/1") {
		t.Error("new ACL not applied")
	}
	if a.Authenticate(ctx, connect("alice", "s3cret pass", "10.0.0.1")) == packet.Success ||
		a.Authenticate(ctx, connect("bob", "hunter2", "10.0.0.1")) != packet.Success {
		t.Error("new password file not applied")
	}

	// A broken file: the error names file and line, the rules stay.
	writeFile(t, dir, "acl", "user alice\ntopic readwrite c/#\ntopic raed d\n")
	err := a.Reload()
	if err == nil || !strings.Contains(err.Error(), aclFile+":3: unknown access \"raed\"") {
		t.Fatalf("reload of a broken ACL: %v", err)
	}
	if !a.CanPublish(alice, "b/1") || a.CanPublish(alice, "c/1") {
		t.Error("a broken file changed the rules")
	}
	os.Remove(pwFile)
	if err := a.Reload(); err == nil || !strings.Contains(err.Error(), pwFile+": no such file or directory") {
		t.Errorf("reload with the password file gone: %v", err)
	}
	if a.Authenticate(ctx, connect("bob", "hunter2", "10.0.0.1")) != packet.Success {
		t.Error("a missing password file dropped the users")
	}
	if !strings.Contains(buf.String(), "auth reload failed") {
		t.Errorf("failed reload not logged:\n%s", buf)
	}
}

func TestACLSubjects(t *testing.T) {
	dir := t.TempDir()
	aclFile := writeFile(t, dir, "acl", "topic read anon/#\nuser alice\ntopic readwrite alice/#\nuser plc-7\ntopic readwrite plc/#\n")
	pwFile := writeFile(t, dir, "passwd", mosqAlice+"\n")
	yes := true

	// Without a password file a claimed user name gets the anonymous rules.
	a := newAuth(t, Config{ACLFile: aclFile, AllowAnonymous: &yes}, Options{})
	claimed := broker.ClientInfo{ClientID: "x", Username: "alice", RemoteAddr: tcp("10.0.0.1")}
	if a.CanPublish(claimed, "alice/1") || !a.CanSubscribe(claimed, "anon/x") {
		t.Error("an unverified user name was given that user's rules")
	}
	// With one, the (verified) user name selects the section.
	a = newAuth(t, Config{ACLFile: aclFile, PasswordFile: pwFile}, Options{})
	if !a.CanPublish(claimed, "alice/1") || a.CanSubscribe(claimed, "anon/x") {
		t.Error("a verified user did not get its rules")
	}
	// A certificate identity is the user name, whatever CONNECT said.
	cert := broker.ClientInfo{ClientID: "x", Username: "alice", RemoteAddr: certAddr{tcp("10.0.0.2"), "plc-7"}}
	if !a.CanPublish(cert, "plc/1") || a.CanPublish(cert, "alice/1") {
		t.Error("certificate identity not used as the user name")
	}
}

func TestCanSubscribeShares(t *testing.T) {
	dir := t.TempDir()
	pwFile := writeFile(t, dir, "passwd", mosqAlice+"\n"+mosqBob+"\n")
	aclFile := writeFile(t, dir, "acl", "user alice\ntopic read data/#\ntopic deny secret/#\nshare hist\nuser bob\ntopic read data/#\ntopic read secret/#\n")
	a := newAuth(t, Config{PasswordFile: pwFile, ACLFile: aclFile}, Options{})
	alice := broker.ClientInfo{ClientID: "a", Username: "alice"}
	bob := broker.ClientInfo{ClientID: "b", Username: "bob"}
	for _, tc := range []struct {
		c      broker.ClientInfo
		filter string
		want   bool
	}{
		{alice, "$share/g/data/#", true},
		{alice, "$share/g/secret/#", false}, // the prefix opens nothing
		{alice, "$share/g/#", false},
		{alice, "$share/hist/data/x", true},
		{bob, "$share/hist/data/x", false}, // reserved for alice
		{bob, "$share/g/secret/#", true},
		{alice, "$share//data/x", false}, // malformed
		{alice, "$share/g", false},
	} {
		if got := a.CanSubscribe(tc.c, tc.filter); got != tc.want {
			t.Errorf("%s subscribe %q: %v, want %v", tc.c.Username, tc.filter, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "passwd", mosqAlice+"\n")
	badPw := writeFile(t, dir, "badpw", mosqAlice+"\nbob:plain\n")
	badACL := writeFile(t, dir, "badacl", "topic read a\nusr x\n")
	if err := (&Config{PasswordFile: good}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (&Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	err := (&Config{PasswordFile: badPw, ACLFile: badACL}).Validate()
	var keys []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ae *Error
		if !errors.As(e, &ae) {
			t.Fatalf("%T is not an *auth.Error", e)
		}
		keys = append(keys, ae.Key)
	}
	if strings.Join(keys, ",") != "password_file,acl_file" {
		t.Errorf("keys %v", keys)
	}
	for _, want := range []string{"password_file: " + badPw + ":2: user \"bob\": not a password hash", "acl_file: " + badACL + ":2: unknown keyword \"usr\""} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q:\n%v", want, err)
		}
	}
	err = (&Config{ACLFile: filepath.Join(dir, "nope")}).Validate()
	if err == nil || !strings.HasPrefix(err.Error(), "acl_file: "+dir+"/nope: no such file") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := New(Config{ACLFile: badACL}, Options{}); err == nil {
		t.Error("New accepted a broken ACL")
	}
}

func TestWorldReadablePasswordFileWarned(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "passwd", mosqAlice+"\n")
	os.Chmod(p, 0o644)
	log, buf := testLogger()
	newAuth(t, Config{PasswordFile: p}, Options{Logger: log})
	if !strings.Contains(buf.String(), "readable by every user") {
		t.Errorf("no warning:\n%s", buf)
	}
}
