package provision_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/gateway/provision"
	"github.com/linemq/linemq/gateway/update"
	"github.com/linemq/linemq/internal/certtest"
)

// secured is the linemq.yaml of a locked-down gateway: passwords, an ACL,
// a TLS listener with client certificates from the plant CA.
const secured = `node_id: gw1
auth:
  allow_anonymous: false
  password_file: /etc/linemq/passwd
  acl_file: /etc/linemq/acl
listeners:
  - type: tls
    address: 127.0.0.1:0
    cert_file: /etc/linemq/tls/server.crt
    key_file: /etc/linemq/tls/server.key
    ca_file: /etc/linemq/tls/ca.crt
    crl_file: /etc/linemq/tls/crl.pem
`

// plantSet writes a whole provisioning set into boot.
func plantSet(t *testing.T, boot string) {
	t.Helper()
	hash, err := auth.NewHash([]byte("s3cret"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	ca := certtest.NewCA(t, "plant CA")
	crt, key := ca.Files(t, "gw1.plant.local", "127.0.0.1")
	crl := filepath.Join(t.TempDir(), "crl.pem")
	ca.WriteCRL(t, crl)
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sshKey, _ := ssh.NewPublicKey(pub)
	_, updatePubPEM, err := update.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	updatePub := string(updatePubPEM)
	files := map[string]string{
		"linemq.yaml":                  secured,
		"linemq/passwd":                "scada:" + hash + "\n",
		"linemq/acl":                   "user scada\ntopic readwrite line/#\n",
		"linemq/tls/server.crt":        read(t, crt),
		"linemq/tls/server.key":        read(t, key),
		"linemq/tls/ca.crt":            read(t, ca.File),
		"linemq/tls/crl.pem":           read(t, crl),
		"linemq/network/eth0.network":  "[Match]\nName=eth0\n\n[Network]\nAddress=10.0.0.11/24\nGateway=10.0.0.1\nDNS=10.0.0.1\n",
		"linemq/hostname":              "gw1\n",
		"linemq/ntp.txt":               "# the plant's time servers\n10.0.0.1\nntp.plant.local\n",
		"linemq/authorized_keys":       string(ssh.MarshalAuthorizedKey(sshKey)),
		"linemq/update-keys/plant.pub": updatePub,
	}
	for name, content := range files {
		p := filepath.Join(boot, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The board's own files share the partition and are not the set's.
	os.WriteFile(filepath.Join(boot, "config.txt"), []byte("arm_64bit=1\n"), 0o644)
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tree maps every file under dir to its content.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out[rel] = read(t, p)
		}
		return nil
	})
	return out
}

// TestApplyWholeSet: a valid set lands in the configuration directory at
// once, with tight modes; the system's files under system/; nothing of it
// stays on the boot partition but the note that it was applied.
func TestApplyWholeSet(t *testing.T) {
	boot, conf := t.TempDir(), filepath.Join(t.TempDir(), "config")
	plantSet(t, boot)
	var trialSaw string
	st, err := provision.Apply(boot, conf, provision.Options{Trial: func(stage string) error {
		trialSaw = read(t, filepath.Join(stage, "linemq.yaml"))
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Applied || len(st.Files) != 12 {
		t.Fatalf("status %+v", st)
	}
	if trialSaw != secured {
		t.Error("the trial did not see the staged configuration")
	}
	got := tree(t, conf)
	for _, want := range []string{"linemq.yaml", "passwd", "acl", "tls/server.key", "tls/crl.pem", "update-keys/plant.pub",
		"system/network/eth0.network", "system/hostname", "system/ntp.txt", "system/authorized_keys", provision.StatusFile} {
		if _, ok := got[want]; !ok {
			t.Errorf("%s not in the configuration directory (%d files)", want, len(got))
		}
	}
	if fi, _ := os.Stat(filepath.Join(conf, "tls/server.key")); fi.Mode().Perm()&0o027 != 0 {
		t.Errorf("the key's mode is %v: readable beyond its owner and group", fi.Mode().Perm())
	}
	left := tree(t, boot)
	if _, ok := left["linemq-applied.txt"]; !ok || len(left) != 2 { // and config.txt
		t.Errorf("left on the boot partition: %v", keys(left))
	}
	if _, err := os.Stat(filepath.Join(boot, "linemq")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("the empty linemq folder stays on the boot partition")
	}
	rs, err := provision.ReadStatus(conf)
	if err != nil || rs == nil || !rs.Applied {
		t.Fatalf("status read back: %+v, %v", rs, err)
	}

	// Nothing on the boot partition: nothing to do.
	if st, err := provision.Apply(boot, conf, provision.Options{}); st != nil || err != nil {
		t.Errorf("an empty boot partition: %+v, %v", st, err)
	}
}

func keys(m map[string]string) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

// TestRefusedSetChangesNothing: a set with one bad line is refused as a
// whole: the configuration in force is untouched, every problem is named
// with its file and line, on the boot partition and in the status.
func TestRefusedSetChangesNothing(t *testing.T) {
	boot, conf := t.TempDir(), filepath.Join(t.TempDir(), "config")
	plantSet(t, boot)
	if _, err := provision.Apply(boot, conf, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	before := tree(t, conf)

	plantSet(t, boot)
	os.WriteFile(filepath.Join(boot, "linemq/acl"), []byte("user scada\ntopic readwrite line/#\ntopic sometimes x\n"), 0o644)
	os.WriteFile(filepath.Join(boot, "linemq/hostname"), []byte("gw_1\n"), 0o644)
	os.WriteFile(filepath.Join(boot, "linemq/tls/server.kye"), []byte("typo"), 0o644)
	st, err := provision.Apply(boot, conf, provision.Options{})
	var pe *provision.Error
	if !errors.As(err, &pe) {
		t.Fatalf("Apply = %v", err)
	}
	for _, want := range []string{"linemq.yaml:5: auth.acl_file: linemq/acl:3: unknown access", `linemq/hostname:1: "gw_1" is not a host name`, "linemq/tls/server.kye: not a file of the provisioning set"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no problem says %q:\n%v", want, err)
		}
	}
	t.Logf("%v", err)
	after := tree(t, conf)
	delete(before, provision.StatusFile)
	delete(after, provision.StatusFile)
	if len(after) != len(before) {
		t.Fatalf("%d files in force after a refusal, %d before", len(after), len(before))
	}
	for n, b := range before {
		if after[n] != b {
			t.Errorf("%s changed by a refused set", n)
		}
	}
	if st.Applied || len(st.Problems) != 3 {
		t.Errorf("status %+v", st)
	}
	if !strings.Contains(read(t, filepath.Join(boot, "linemq-error.txt")), "linemq/acl:3") {
		t.Error("linemq-error.txt does not name the ACL's line")
	}
	if _, err := os.Stat(filepath.Join(boot, "linemq/passwd")); err != nil {
		t.Error("a refused set's files were removed from the boot partition")
	}
}

// TestCheckFindsEachProblem: each kind of file is checked as the program
// that reads it would.
func TestCheckFindsEachProblem(t *testing.T) {
	other := certtest.NewCA(t, "another CA")
	crlOther := filepath.Join(t.TempDir(), "crl.pem")
	other.WriteCRL(t, crlOther)
	_, otherKey := other.Files(t, "x")
	for _, tc := range []struct {
		name, file, content, want string
	}{
		{"key of another certificate", "linemq/tls/server.key", read(t, otherKey), "linemq/tls/server.key: private key does not match public key"},
		{"list of another CA", "linemq/tls/crl.pem", read(t, crlOther), "linemq/tls/crl.pem: the file, list 1 (issuer CN=another CA): not signed by any authority"},
		{"bad config key", "linemq.yaml", secured + "mqtt:\n  max_keepalive: 0\n", "linemq.yaml:14: mqtt.max_keepalive"},
		{"config naming a file not in the set", "linemq.yaml", strings.Replace(secured, "/etc/linemq/acl", "/etc/linemq/acl.txt", 1), "/etc/linemq/acl.txt"},
		{"network address without prefix", "linemq/network/eth0.network", "[Match]\nName=eth0\n[Network]\nAddress=10.0.0.11\n", "linemq/network/eth0.network:4: Address=10.0.0.11: an address with its prefix length"},
		{"network section typo", "linemq/network/eth0.network", "[Match]\nName=eth0\n[Netwrok]\nDHCP=yes\n", "unknown section [Netwrok]"},
		{"NTP server", "linemq/ntp.txt", "ntp..plant\n", `linemq/ntp.txt:1: "ntp..plant" is neither an address nor a host name`},
		{"SSH key", "linemq/authorized_keys", "ssh-ed25519 AAAAnotakey me@pc\n", "linemq/authorized_keys:1: not an SSH public key"},
		{"password line", "linemq/passwd", "scada\n", "passwd:1"},
		{"update key", "linemq/update-keys/plant.pub", read(t, otherKey), `linemq/update-keys/plant.pub: not an update signing key: not a PEM "PUBLIC KEY" block`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			boot, conf := t.TempDir(), filepath.Join(t.TempDir(), "config")
			plantSet(t, boot)
			os.WriteFile(filepath.Join(boot, tc.file), []byte(tc.content), 0o644)
			_, err := provision.Apply(boot, conf, provision.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want a problem with %q, got:\n%v", tc.want, err)
			}
			if _, err := os.Stat(filepath.Join(conf, "linemq.yaml")); err == nil {
				t.Error("a refused set was applied")
			}
		})
	}
}

// TestPowerCutDuringSwap: each moment a power cut can stop Apply at
// leaves, at the next Apply, the old set or the new one whole.
func TestPowerCutDuringSwap(t *testing.T) {
	for _, tc := range []struct {
		name       string
		dirs       []string // which of conf, conf.old, conf.new exist
		wantMarker string   // whose file is in force afterwards
	}{
		{"staging unfinished", []string{"", ".new"}, "old"},
		{"after conf moved aside", []string{".old", ".new"}, "new"},
		{"after the stage moved in", []string{"", ".old"}, "new-in-place"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := filepath.Join(t.TempDir(), "config")
			for _, suffix := range tc.dirs {
				os.MkdirAll(conf+suffix, 0o750)
				marker := map[string]string{"": "old", ".old": "old", ".new": "new"}[suffix]
				if suffix == "" && tc.wantMarker == "new-in-place" {
					marker = "new-in-place"
				}
				os.WriteFile(filepath.Join(conf+suffix, "marker"), []byte(marker), 0o600)
			}
			if _, err := provision.Apply(t.TempDir(), conf, provision.Options{}); err != nil {
				t.Fatal(err)
			}
			if got := read(t, filepath.Join(conf, "marker")); got != tc.wantMarker {
				t.Errorf("in force: %s, want %s", got, tc.wantMarker)
			}
			for _, s := range []string{".old", ".new"} {
				if _, err := os.Stat(conf + s); err == nil {
					t.Errorf("%s left behind", s)
				}
			}
		})
	}
}
