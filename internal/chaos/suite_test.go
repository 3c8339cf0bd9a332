package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// built is the linemq binary the package's process tests share, built by
// the first of them that runs (suiteBinary) and removed by TestMain.
var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// suiteBinary is the preamble of a test that runs real linemq processes:
// it skips t in -short mode (what says what the test runs) and unless the
// fault suite is asked for, and returns the linemq binary.
//
// The fault suite's figures are timings (a bounded wait, a takeover
// bound): run next to every other package's race-detector tests on two
// cores, the gateways' etcd answers late and the run measures the
// machine, not the line. make test runs it alone, after the rest, with
// LINEMQ_FAULT_SUITE=1.
func suiteBinary(t *testing.T, what string) string {
	t.Helper()
	if testing.Short() {
		t.Skip(what + ": skipped in -short mode")
	}
	if os.Getenv("LINEMQ_FAULT_SUITE") == "" {
		t.Skip("runs with the fault suite, alone, after the other packages: make test does it (LINEMQ_FAULT_SUITE=1)")
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "linemq-chaos-bin-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "linemq")
		if out, err := exec.Command("go", "build", "-o", built.path, "github.com/linemq/linemq/cmd/linemq").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}
