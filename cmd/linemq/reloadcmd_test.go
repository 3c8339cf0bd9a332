package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestReloadCommand: `linemq reload PID`, which the unit's ExecReload=
// runs with $MAINPID, makes the running daemon reload (it logs so); a bad
// PID is a usage error, a process that is gone an error.
func TestReloadCommand(t *testing.T) {
	dir := t.TempDir()
	d := start(t, "-mqtt-listen", "127.0.0.1:0", "-http-listen", "", "-data-dir", filepath.Join(dir, "data"))
	d.waitLine(t, readyRE, 30*time.Second)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"reload", fmt.Sprint(d.cmd.Process.Pid)}, &stdout, &stderr); code != 0 {
		t.Fatalf("linemq reload: exit %d: %s", code, stderr.String())
	}
	d.waitLine(t, regexp.MustCompile(`msg=reloaded`), 10*time.Second)

	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"reload"}, 2},
		{[]string{"reload", "x"}, 2},
		{[]string{"reload", "-1"}, 2},
		{[]string{"reload", "-h"}, 0},
		{[]string{"reload", "999999999"}, 1},
	} {
		if code := run(c.args, &stdout, &stderr); code != c.code {
			t.Errorf("linemq %v: exit %d, want %d", c.args, code, c.code)
		}
	}
}
