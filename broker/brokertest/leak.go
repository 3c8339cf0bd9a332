package brokertest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Main runs a package's tests and then fails the package if goroutines of
// linemq, or of the MQTT client libraries the tests use, outlive them: a
// server or client that Close or Shutdown did not stop. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { brokertest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := Leaked(10 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// Leaked polls until no goroutine runs code of this module or of the paho
// clients, and returns the stacks of those still running at the deadline
// ("" when there are none).
func Leaked(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for g := range strings.SplitSeq(string(buf), "\n\n") {
			if strings.Contains(g, "testing.(*M)") || strings.Contains(g, ".TestMain(") || strings.Contains(g, "brokertest.Leaked") {
				continue
			}
			if strings.Contains(g, "github.com/linemq/linemq/") || strings.Contains(g, "paho.golang") || strings.Contains(g, "paho.mqtt.golang") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
