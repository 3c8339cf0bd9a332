package auth

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// Lines written by Debian's mosquitto_passwd 2.0.11: alice with the
// default sha512-pbkdf2 ($7$, password "s3cret pass"), bob with -H sha512
// ($6$, password "hunter2").
const (
	mosqAlice = `alice:$7$101$gB1VQpqPBaA5Yis3$hL7MKYNLSuv3p8vU0FiufFJRbTTnCm7IRm7DTxsoRdtqe+WN6HAn1Ks/awxmSMMRCaQ4s6FRoLRTLzwRWENrWw==`
	mosqBob   = `bob:$6$vjFJP6fwp0ZR3x2o$Q95xHW7cMUJy5T/NkKr/uvpm3MfFsntzNtU8ravBhltl7lX7pv1Q+EAuQlCqIwbMpSjWrtRBcZbB29rkj+kjWQ==`
)

// bcryptLine returns a password line for user with a bcrypt hash of
// password under the given prefix ($2a$, $2b$ or $2y$: the same algorithm,
// which x/crypto writes as $2a$).
func bcryptLine(t *testing.T, user, password, prefix string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return user + ":" + prefix + strings.TrimPrefix(string(h), "$2a$")
}

func TestVerifySchemes(t *testing.T) {
	ownHash, err := NewHash([]byte("line3 ok"), 0)
	if err != nil {
		t.Fatal(err)
	}
	file := strings.Join([]string{
		"# written by hand and by tools",
		mosqAlice,
		mosqBob,
		"",
		bcryptLine(t, "carol", "pa:ss", "$2a$"),
		bcryptLine(t, "dave", "pa:ss", "$2b$"),
		bcryptLine(t, "erin", "pa:ss", "$2y$"),
		"frank:" + ownHash + "\r",
	}, "\n")
	p, err := parsePasswords("pw", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user, good string
		kind       hashKind
	}{
		{"alice", "s3cret pass", kindPBKDF2},
		{"bob", "hunter2", kindSHA512},
		{"carol", "pa:ss", kindBcrypt},
		{"dave", "pa:ss", kindBcrypt},
		{"erin", "pa:ss", kindBcrypt},
		{"frank", "line3 ok", kindPBKDF2},
	} {
		h := p.users[tc.user]
		if h == nil {
			t.Fatalf("%s: not loaded", tc.user)
		}
		if h.kind != tc.kind {
			t.Errorf("%s: kind %c, want %c", tc.user, h.kind, tc.kind)
		}
		if !h.verify([]byte(tc.good)) {
			t.Errorf("%s: right password refused", tc.user)
		}
		for _, bad := range []string{"", tc.good + "x", strings.ToUpper(tc.good), tc.good[:len(tc.good)-1]} {
			if h.verify([]byte(bad)) {
				t.Errorf("%s: wrong password %q accepted", tc.user, bad)
			}
		}
	}
	if p.decoy.kind != kindPBKDF2 || p.decoy.iter != 101 {
		t.Errorf("decoy %c/%d, want the first line's $7$ with 101 iterations", p.decoy.kind, p.decoy.iter)
	}
	if p.decoy.verify([]byte("")) || p.decoy.verify([]byte("s3cret pass")) {
		t.Error("the decoy accepted a password")
	}
}

func TestNewHashFormat(t *testing.T) {
	h, err := NewHash([]byte("x"), 101)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(h, "$")
	if len(f) != 5 || f[1] != "7" || f[2] != "101" || len(f[3]) != 16 || len(f[4]) != 88 {
		t.Fatalf("hash %q is not $7$101$<16 base64 chars>$<88 base64 chars> as mosquitto_passwd writes", h)
	}
	if _, err := NewHash([]byte("x"), MaxIterations+1); err == nil {
		t.Error("iterations above the maximum accepted")
	}
}

func TestPasswordFileErrors(t *testing.T) {
	huge := "$7$" + "2000000" + strings.TrimPrefix(mosqAlice[len("alice:$7$101"):], "")
	for _, tc := range []struct{ name, line, want string }{
		{"plain text", "u:secret", `pw:2: user "u": not a password hash: a plain-text password?`},
		{"no colon", "justaname", `pw:2: no ':' between user name and hash`},
		{"unknown type", "u:$5$abc$def", `pw:2: user "u": unknown hash type $5$`},
		{"bad base64", "u:$6$!!$!!", `pw:2: user "u": malformed $6$ hash: salt is not base64`},
		{"short 6", "u:$6$YWJj$YWJj", `pw:2: user "u": malformed $6$ hash: 3-byte hash, want 64`},
		{"bad iterations", "u:$7$x$YWJj$YWJj", `pw:2: user "u": malformed $7$ hash: iteration count "x"`},
		{"too many iterations", "u:" + huge, `pw:2: user "u": $7$ iteration count 2000000 is above 1000000`},
		{"bcrypt cost", "u:$2a$31$" + strings.Repeat("a", 53), `pw:2: user "u": bcrypt cost 31 is above 14`},
		{"repeat", mosqAlice, `pw:2: user "alice" repeats line 1`},
		{"empty user", ":$6$YWJj$YWJj", `pw:2: empty user name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parsePasswords("pw", []byte(mosqAlice+"\n"+tc.line+"\n"))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to start with %q", err, tc.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line != 2 {
				t.Errorf("not a *ParseError for line 2: %#v", err)
			}
		})
	}
	_, err := loadPasswords(filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.HasSuffix(err.Error(), "missing: no such file or directory") {
		t.Errorf("missing file: %v", err)
	}
}

// TestMosquittoPasswdFile reads a file written by Debian's mosquitto_passwd,
// with both of its hash types, as is.
func TestMosquittoPasswdFile(t *testing.T) {
	bin, err := exec.LookPath("mosquitto_passwd")
	if err != nil {
		t.Skip("mosquitto_passwd not installed (apt-get install mosquitto); CI installs it")
	}
	file := filepath.Join(t.TempDir(), "passwd")
	for _, args := range [][]string{
		{"-c", "-b", file, "plc-1", "correct horse"},
		{"-H", "sha512", "-b", file, "old-hmi", "battery staple"},
		{"-b", file, "line3", "p@ss:w0rd with spaces"},
	} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd %v: %v\n%s", args, err, out)
		}
	}
	data, _ := os.ReadFile(file)
	t.Logf("mosquitto_passwd wrote:\n%s", data)
	p, err := loadPasswords(file)
	if err != nil {
		t.Fatal(err)
	}
	for user, pw := range map[string]string{"plc-1": "correct horse", "old-hmi": "battery staple", "line3": "p@ss:w0rd with spaces"} {
		h := p.users[user]
		if h == nil {
			t.Fatalf("%s missing", user)
		}
		if !h.verify([]byte(pw)) {
			t.Errorf("%s: right password refused", user)
		}
		if h.verify([]byte(pw + " ")) {
			t.Errorf("%s: wrong password accepted", user)
		}
	}
	if p.users["old-hmi"].kind != kindSHA512 || p.users["plc-1"].kind != kindPBKDF2 {
		t.Error("hash kinds not as mosquitto_passwd was asked for")
	}
}

func TestCheckUsername(t *testing.T) {
	for _, bad := range []string{"", "a:b", " a", "a\n", "a\x00", string([]byte{0xff})} {
		if CheckUsername(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, good := range []string{"a", "line 3 plc", "Ünïcode", "a@b.c"} {
		if err := CheckUsername(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
}
