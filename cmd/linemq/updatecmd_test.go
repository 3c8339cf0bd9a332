package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linemq/linemq/gateway/update"
)

// TestUpdateCommands: a key pair made with keygen signs the linemq binary
// into a bundle; verify accepts it with the public key and refuses it,
// saying why, with another key, for another architecture, and cut short.
func TestUpdateCommands(t *testing.T) {
	dir := t.TempDir()
	keys, other := filepath.Join(dir, "keys"), filepath.Join(dir, "other")
	for _, d := range []string{keys, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := func(want int, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"update"}, args...), &stdout, &stderr); code != want {
			t.Fatalf("linemq update %q: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, want, stdout.String(), stderr.String())
		}
		return stdout.String() + stderr.String()
	}
	out := cmd(0, "keygen", "-dir", dir, "plant")
	if !strings.Contains(out, "plant.key") || !strings.Contains(out, "key id ") {
		t.Errorf("keygen said %q", out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "plant.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("plant.key: %v, %v; want mode 0600", err, fi)
	}
	cmd(1, "keygen", "-dir", dir, "plant") // never overwrites a key
	os.Rename(filepath.Join(dir, "plant.pub"), filepath.Join(keys, "plant.pub"))
	cmd(0, "keygen", "-dir", other, "stranger")

	arch := update.Arch()
	bundle := filepath.Join(dir, "linemq.bundle")
	cmd(2, "bundle", "-key", filepath.Join(dir, "plant.key"), binary)
	out = cmd(1, "bundle", "-key", filepath.Join(dir, "plant.key"), "-version", testVersion, "-arch", "riscv64", "-o", bundle, binary)
	if !strings.Contains(out, "is a "+arch+" build") {
		t.Errorf("bundle with the wrong -arch said %q", out)
	}
	out = cmd(0, "bundle", "-key", filepath.Join(dir, "plant.key"), "-version", testVersion, "-o", bundle, binary)
	if !strings.Contains(out, testVersion+" for "+arch) {
		t.Errorf("bundle said %q", out)
	}

	out = cmd(0, "verify", "-keys", keys, bundle)
	if !strings.Contains(out, "is good: linemq "+testVersion+" for "+arch) || !strings.Contains(out, "signed by plant") {
		t.Errorf("verify said %q", out)
	}
	if out = cmd(1, "verify", "-keys", other, bundle); !strings.Contains(out, "signed by none of the 1 trusted keys") {
		t.Errorf("verify with another key said %q", out)
	}
	if out = cmd(1, "verify", "-keys", keys, "-arch", "armv6", bundle); !strings.Contains(out, "it is for "+arch+"; this gateway runs armv6") {
		t.Errorf("verify for another architecture said %q", out)
	}
	cmd(0, "verify", "-keys", keys, "-arch", "any", bundle)
	b, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.bundle")
	if err := os.WriteFile(cut, b[:len(b)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	if out = cmd(1, "verify", "-keys", keys, cut); !strings.Contains(out, "ends early") {
		t.Errorf("verify of a truncated bundle said %q", out)
	}
	if out = cmd(1, "verify", "-keys", filepath.Join(dir, "none"), bundle); !strings.Contains(out, "no trusted update keys") {
		t.Errorf("verify without keys said %q", out)
	}
	cmd(2, "sign")
}
