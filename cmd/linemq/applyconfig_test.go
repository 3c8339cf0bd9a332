package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// applyConfig is the appliance's boot-time script that takes linemq.yaml
// from the boot partition.
const applyConfig = "../../buildroot/board/linemq/common/rootfs-overlay/usr/libexec/linemq/apply-config"

// TestApplyConfigRejectsWhatCannotStart runs the appliance's apply-config
// on a boot partition in a temporary directory: a linemq.yaml the daemon
// cannot start with is refused, with the reason in linemq-error.txt beside
// it, and nothing is applied. It used to reject only a configuration error (a bad
// key or value, a file it names missing): a listener on an address the
// gateway does not have (a typo in an IP address; exit 1) was applied, and
// the gateway then failed at every boot, which with StartLimitAction=reboot
// is a reboot loop. A good one is applied and leaves the boot partition,
// and the system's files of the set reach /run.
func TestApplyConfigRejectsWhatCannotStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the daemon")
	}
	for _, tc := range []struct {
		name, yaml string
		rejected   bool
		reason     string
	}{
		{"a good file", "mqtt:\n  max_keepalive: 60s\n", false, ""},
		{"a bad value", "mqtt:\n  max_keepalive: 0\n", true, "mqtt.max_keepalive"},
		{"a missing password file", "auth:\n  password_file: /nonexistent/linemq.passwd\n", true, "/nonexistent/linemq.passwd"},
		{"an address it does not have", "listeners:\n  - type: tcp\n    address: 192.0.2.77:1883\n", true, "192.0.2.77:1883"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			boot, run := filepath.Join(dir, "boot"), filepath.Join(dir, "run")
			if err := os.MkdirAll(filepath.Join(boot, "linemq"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(boot, "linemq.yaml"), tc.yaml)
			writeFile(t, filepath.Join(boot, "linemq", "ntp.txt"), "10.0.0.1\nntp.plant.local\n")
			if err := os.MkdirAll(filepath.Join(boot, "linemq", "network"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(boot, "linemq", "network", "eth0.network"), "[Match]\nName=eth0\n\n[Network]\nAddress=10.0.0.11/24\n")
			cmd := exec.Command("sh", applyConfig)
			cmd.Env = append(os.Environ(), "LINEMQ_BOOT="+boot, "LINEMQ_ETC="+filepath.Join(dir, "etc"),
				"LINEMQ_CONF_DIR="+filepath.Join(dir, "config"), "LINEMQ_BIN="+binary, "LINEMQ_RUN="+run, "LINEMQ_NO_HOSTNAME=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("apply-config: %v\n%s", err, out)
			}
			_, statErr := os.Stat(filepath.Join(dir, "config", "linemq.yaml"))
			if applied := statErr == nil; applied == tc.rejected {
				t.Fatalf("applied %v, want %v\n%s", applied, !tc.rejected, out)
			}
			if !tc.rejected {
				if _, err := os.Stat(filepath.Join(boot, "linemq.yaml")); err == nil {
					t.Error("an applied linemq.yaml stays on the boot partition")
				}
				ntp, err := os.ReadFile(filepath.Join(run, "systemd", "timesyncd.conf.d", "10-linemq.conf"))
				if err != nil || !strings.Contains(string(ntp), "NTP=10.0.0.1 ntp.plant.local") {
					t.Errorf("timesyncd's servers: %v\n%s\n%s", err, ntp, out)
				}
				// networkd runs as its own user: a .network it cannot read
				// is skipped, and the gateway takes a DHCP address (seen
				// under systemd in make systemd-test).
				fi, err := os.Stat(filepath.Join(run, "systemd", "network", "10-linemq-eth0.network"))
				switch {
				case err != nil:
					t.Errorf("the .network in /run: %v\n%s", err, out)
				case fi.Mode().Perm() != 0o644:
					t.Errorf("the .network in /run has mode %v, want 0644\n%s", fi.Mode().Perm(), out)
				}
				return
			}
			if _, err := os.Stat(filepath.Join(boot, "linemq.yaml")); err != nil {
				t.Error("a refused linemq.yaml left the boot partition")
			}
			why, err := os.ReadFile(filepath.Join(boot, "linemq-error.txt"))
			if err != nil || !strings.Contains(string(why), tc.reason) {
				t.Errorf("linemq-error.txt does not name %q: %v\n%s", tc.reason, err, why)
			}
		})
	}
}
