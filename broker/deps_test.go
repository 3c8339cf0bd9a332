package broker_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the core free of the outer layers: nothing under
// broker/ may reach etcd, bbolt, periph.io or linemq's storage, gateway and
// hw packages (DESIGN.md, "Layout and dependency direction").
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/linemq/linemq/broker/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{"go.etcd.io/", "periph.io/", "github.com/linemq/linemq/storage",
		"github.com/linemq/linemq/gateway", "github.com/linemq/linemq/hw"}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("broker/... depends on %s: the core imports nothing of ours outside broker/ and no etcd, bbolt or GPIO (docs/architecture.md says where such code goes)", dep)
			}
		}
		// Only the standard library and broker's own packages.
		if !strings.HasPrefix(dep, "github.com/linemq/linemq/broker") {
			t.Errorf("broker/... depends on the non-standard package %s: broker/ uses the standard library only (docs/architecture.md)", dep)
		}
	}
}
