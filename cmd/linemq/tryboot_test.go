package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The tryboot boards' RAUC integration (buildroot/board/linemq/tryboot):
// the custom bootloader backend, the post-install handler and the trial
// gate, shell scripts of the root file system.
const (
	trybootDir     = "../../buildroot/board/linemq/tryboot"
	raucBackend    = trybootDir + "/rootfs-overlay/usr/libexec/linemq/rauc-tryboot"
	raucPostInst   = trybootDir + "/rootfs-overlay/usr/libexec/linemq/rauc-post-install"
	osTrial        = trybootDir + "/rootfs-overlay/usr/libexec/linemq/os-trial"
	factoryAutoTxt = trybootDir + "/autoboot.txt"
)

// piCard is a gateway's card and its Raspberry Pi 4/5 bootloader, as the
// Raspberry Pi documentation describes them for autoboot.txt: partition 1
// holds autoboot.txt; an ordinary boot takes boot_partition of [all], a
// boot with the tryboot flag the value [tryboot] sets after it; the flag
// is set only by a reboot whose argument is "0 tryboot" and is spent by
// the boot it starts. The firmware reports what it did in the device tree
// (chosen/bootloader/partition and tryboot, 32-bit big-endian), and /run
// starts empty at every boot.
type piCard struct {
	t                 *testing.T
	sh                scriptShell
	autoboot, dt, run string
	booted            int
}

// scriptShell runs the scripts: the host's sh with its tools, or BusyBox
// with nothing but its applets on PATH, as on the appliance.
type scriptShell struct {
	name string
	sh   []string
	env  []string
}

func (s scriptShell) command(script string, args ...string) *exec.Cmd {
	argv := append(append(s.sh[1:len(s.sh):len(s.sh)], script), args...)
	cmd := exec.Command(s.sh[0], argv...)
	cmd.Env = append(os.Environ(), s.env...)
	return cmd
}

// scriptShells are the shells the tests run the appliance's scripts
// under: sh, and BusyBox (Debian's busybox package) when it is here.
func scriptShells(t *testing.T) []scriptShell {
	shells := []scriptShell{{name: "sh", sh: []string{"sh"}}}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Log("busybox not found (apt-get install busybox): the scripts run under sh only")
		return shells
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, applet := range strings.Fields(string(out)) {
		if err := os.Symlink(bb, filepath.Join(dir, applet)); err != nil {
			t.Fatal(err)
		}
	}
	return append(shells, scriptShell{name: "busybox", sh: []string{bb, "sh"}, env: []string{"PATH=" + dir}})
}

func newPiCard(t *testing.T, sh scriptShell) *piCard {
	dir := t.TempDir()
	c := &piCard{t: t, sh: sh, autoboot: filepath.Join(dir, "p1"), dt: filepath.Join(dir, "dt"), run: filepath.Join(dir, "run")}
	for _, d := range []string{c.autoboot, c.dt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	factory, err := os.ReadFile(factoryAutoTxt)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(c.autoboot, "autoboot.txt"), string(factory))
	c.boot(false)
	return c
}

// boot starts the card: tryboot is whether the reset carried the flag.
func (c *piCard) boot(tryboot bool) int {
	c.t.Helper()
	f, err := os.Open(filepath.Join(c.autoboot, "autoboot.txt"))
	if err != nil {
		c.t.Fatalf("the bootloader found no autoboot.txt: %v", err)
	}
	defer f.Close()
	part, section := 0, ""
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if v, ok := strings.CutPrefix(line, "boot_partition="); ok && (section == "[all]" || section == "[tryboot]" && tryboot) {
			part = int(v[0] - '0')
		}
	}
	if part != 2 && part != 3 {
		c.t.Fatalf("autoboot.txt names boot partition %d", part)
	}
	cell := func(name string, v int) {
		b := []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
		if err := os.WriteFile(filepath.Join(c.dt, name), b, 0o644); err != nil {
			c.t.Fatal(err)
		}
	}
	flag := 0
	if tryboot {
		flag = 1
	}
	cell("partition", part)
	cell("tryboot", flag)
	os.RemoveAll(c.run)
	c.booted = part
	return part
}

// reboot is an orderly reboot: systemd passes the reboot parameter the
// backend left in /run/systemd/reboot-param, if any.
func (c *piCard) reboot() int {
	b, _ := os.ReadFile(filepath.Join(c.run, "systemd", "reboot-param"))
	return c.boot(string(b) == "0 tryboot")
}

// backend runs rauc-tryboot as RAUC would; want is its exit status.
func (c *piCard) backend(want int, args ...string) string {
	c.t.Helper()
	cmd := c.sh.command(raucBackend, args...)
	cmd.Env = append(cmd.Env, "LINEMQ_AUTOBOOT_DIR="+c.autoboot, "LINEMQ_BOOTLOADER_DT="+c.dt,
		"LINEMQ_REBOOT_PARAM="+filepath.Join(c.run, "systemd", "reboot-param"))
	out, err := cmd.Output()
	code := 0
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		code, stderr = ee.ExitCode(), string(ee.Stderr)
	} else if err != nil {
		c.t.Fatal(err)
	}
	if code != want {
		c.t.Fatalf("rauc-tryboot %s: exit %d, want %d; %s%s", strings.Join(args, " "), code, want, out, stderr)
	}
	if code != 0 {
		return strings.TrimSpace(stderr)
	}
	return strings.TrimSpace(string(out))
}

func (c *piCard) expect(args string, want string) {
	c.t.Helper()
	if got := c.backend(0, strings.Fields(args)...); got != want {
		c.t.Fatalf("rauc-tryboot %s = %q, want %q", args, got, want)
	}
}

// install is what RAUC does to the slot it writes: marks it bad, writes
// it, then makes it primary.
func (c *piCard) install(slot string) {
	c.t.Helper()
	c.backend(0, "set-state", slot, "bad")
	c.backend(0, "set-primary", slot)
}

// TestTrybootBackend drives RAUC's custom backend for the Pi's tryboot
// through the life of a card: an update tried once and committed, one
// rolled back by a power cut during its trial, one the trial gate marks
// bad, the next update from the other slot, and what it refuses.
func TestTrybootBackend(t *testing.T) {
	for _, sh := range scriptShells(t) {
		t.Run(sh.name, func(t *testing.T) { testTrybootBackend(t, sh) })
	}
}

func testTrybootBackend(t *testing.T, sh scriptShell) {
	c := newPiCard(t, sh)
	c.expect("get-primary", "A")
	c.expect("get-current", "A")
	c.expect("get-state A", "good")
	c.expect("get-state B", "bad")
	factory, _ := os.ReadFile(filepath.Join(c.autoboot, "autoboot.txt"))

	// An update into B: nothing about ordinary boots changes; only the
	// next orderly reboot tries B.
	c.install("B")
	c.expect("get-state B", "good")
	if now, _ := os.ReadFile(filepath.Join(c.autoboot, "autoboot.txt")); string(now) != string(factory) {
		t.Fatalf("installing rewrote autoboot.txt:\n%s", now)
	}
	if p := c.reboot(); p != 3 {
		t.Fatalf("the reboot after the install booted partition %d, want 3 (slot B on trial)", p)
	}
	c.expect("get-current", "B")
	c.expect("get-primary", "A")
	if msg := c.backend(1, "set-state", "A", "bad"); !strings.Contains(msg, "on trial") {
		t.Fatalf("an install during the trial: %q", msg)
	}

	// A power cut (or the watchdog, or a crash and reset) during the
	// trial: the flag is spent, A comes back by itself.
	if p := c.boot(false); p != 2 {
		t.Fatalf("a power cut during B's trial booted partition %d, want 2 (A)", p)
	}
	c.expect("get-current", "A")
	c.expect("get-state B", "bad")

	// Installed again, tried again, and this time committed by the trial
	// gate (rauc status mark-good booted).
	c.install("B")
	if p := c.reboot(); p != 3 {
		t.Fatalf("booted %d, want 3", p)
	}
	c.expect("set-state B good", "")
	c.expect("get-primary", "B")
	committed, _ := os.ReadFile(filepath.Join(c.autoboot, "autoboot.txt"))
	if len(committed) != len(factory) || !strings.Contains(string(committed), "[all]\ntryboot_a_b=1\nboot_partition=3\n[tryboot]\nboot_partition=2\n") {
		t.Fatalf("the commit wrote (%d bytes, was %d):\n%s", len(committed), len(factory), committed)
	}
	for i := 0; i < 2; i++ {
		if p := c.boot(false); p != 3 {
			t.Fatalf("an ordinary boot after the commit booted %d, want 3 (B)", p)
		}
	}
	c.expect("get-state B", "good")
	c.expect("get-state A", "bad")
	c.expect("set-state B good", "") // committed already: nothing to do

	// The next update goes into A, tried the same way; the gate finds it
	// unhealthy and marks it bad: the reboot after returns to B.
	c.install("A")
	if p := c.reboot(); p != 2 {
		t.Fatalf("booted %d, want 2 (A on trial)", p)
	}
	c.expect("set-state A bad", "")
	if p := c.reboot(); p != 3 {
		t.Fatalf("the reboot after a bad trial booted %d, want 3 (B)", p)
	}
	c.expect("get-primary", "B")

	// A pending trial can be taken back before the reboot.
	c.install("A")
	c.expect("set-primary B", "")
	if p := c.reboot(); p != 3 {
		t.Fatalf("after set-primary of the committed slot the reboot booted %d, want 3", p)
	}

	// Refusals, each with its reason.
	for _, tc := range []struct{ args, reason string }{
		{"set-state B bad", "committed slot"},
		{"set-state A good", "neither committed nor the running trial"},
		{"set-primary C", "unknown slot 'C'"},
		{"set-state A maybe", "good or bad"},
		{"frobnicate", "usage"},
	} {
		if msg := c.backend(1, strings.Fields(tc.args)...); !strings.Contains(msg, tc.reason) {
			t.Errorf("rauc-tryboot %s: %q, want it to say %q", tc.args, msg, tc.reason)
		}
	}
	writeFile(t, filepath.Join(c.autoboot, "autoboot.txt"), "[all]\nboot_partition=7\n")
	if msg := c.backend(1, "get-primary"); !strings.Contains(msg, "not 2 or 3") {
		t.Errorf("a damaged autoboot.txt: %q", msg)
	}
	os.Remove(filepath.Join(c.autoboot, "autoboot.txt"))
	if msg := c.backend(1, "get-primary"); !strings.Contains(msg, "autoboot.txt: missing") {
		t.Errorf("no autoboot.txt: %q", msg)
	}
	os.Remove(filepath.Join(c.dt, "partition"))
	if msg := c.backend(1, "get-current"); !strings.Contains(msg, "did not say which partition") {
		t.Errorf("no device-tree report: %q", msg)
	}
}

// TestRaucPostInstall runs the handler as RAUC would after writing slot
// B (its firmware partition and root), dry: it must point B's firmware at
// B's root. And the rewrite itself, on the cmdline.txt of the boards.
func TestRaucPostInstall(t *testing.T) {
	for _, sh := range scriptShells(t) {
		t.Run(sh.name, func(t *testing.T) { testRaucPostInstall(t, sh) })
	}
}

func testRaucPostInstall(t *testing.T, sh scriptShell) {
	cmd := sh.command(raucPostInst)
	cmd.Env = append(cmd.Env, "LINEMQ_RAUC_DRY_RUN=1",
		"RAUC_SLOTS=1 2 3 4", "RAUC_TARGET_SLOTS=3 4",
		"RAUC_SLOT_NAME_1=rootfs.0", "RAUC_SLOT_CLASS_1=rootfs", "RAUC_SLOT_DEVICE_1=/dev/mmcblk0p5", "RAUC_SLOT_BOOTNAME_1=A",
		"RAUC_SLOT_NAME_2=boot.0", "RAUC_SLOT_CLASS_2=boot", "RAUC_SLOT_DEVICE_2=/dev/mmcblk0p2", "RAUC_SLOT_PARENT_2=rootfs.0",
		"RAUC_SLOT_NAME_3=rootfs.1", "RAUC_SLOT_CLASS_3=rootfs", "RAUC_SLOT_DEVICE_3=/dev/mmcblk0p6", "RAUC_SLOT_BOOTNAME_3=B",
		"RAUC_SLOT_NAME_4=boot.1", "RAUC_SLOT_CLASS_4=boot", "RAUC_SLOT_DEVICE_4=/dev/mmcblk0p3", "RAUC_SLOT_PARENT_4=rootfs.1")
	out, err := cmd.CombinedOutput()
	if want := "would set /dev/mmcblk0p3 cmdline.txt: root=/dev/mmcblk0p6 rauc.slot=B\n"; err != nil || string(out) != want {
		t.Fatalf("post-install handler: %v\n%s\nwant %s", err, out, want)
	}
	// A bundle without the firmware image is an error, not a silent boot
	// of the old kernel line.
	again := sh.command(raucPostInst)
	again.Env = append(cmd.Env, "RAUC_TARGET_SLOTS=3")
	if out, err := again.CombinedOutput(); err == nil || !strings.Contains(string(out), "no boot slot") {
		t.Fatalf("without a boot slot: %v %s", err, out)
	}

	for _, board := range []string{"rpi4_64", "rpi5"} {
		src, err := os.ReadFile("../../buildroot/board/linemq/" + board + "/cmdline.txt")
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "cmdline.txt")
		writeFile(t, f, string(src))
		for _, slot := range []struct{ dev, name string }{{"/dev/mmcblk0p6", "B"}, {"/dev/mmcblk0p5", "A"}} {
			if out, err := sh.command(raucPostInst, "--fix-cmdline", f, slot.dev, slot.name).CombinedOutput(); err != nil {
				t.Fatalf("%v %s", err, out)
			}
			got, _ := os.ReadFile(f)
			rest := strings.Fields(string(src))[1:] // the board's line after root=
			want := "root=" + slot.dev + " rauc.slot=" + slot.name + " " + strings.Join(rest, " ") + "\n"
			if string(got) != want {
				t.Fatalf("%s slot %s: cmdline.txt\n%q, want\n%q", board, slot.name, got, want)
			}
		}
	}
}

// TestOSTrialOrdinaryBoot: on a boot without the tryboot flag the trial
// gate does nothing (it runs at every boot of a tryboot board).
func TestOSTrialOrdinaryBoot(t *testing.T) {
	for _, sh := range scriptShells(t) {
		c := newPiCard(t, sh)
		cmd := sh.command(osTrial)
		cmd.Env = append(cmd.Env, "LINEMQ_BOOTLOADER_DT="+c.dt)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "an ordinary boot") {
			t.Fatalf("%s: os-trial on an ordinary boot: %v %s", sh.name, err, out)
		}
	}
}
