package hw

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps periph.io's host drivers and their global
// registries inside hw/board (STYLE.md, periph): every other hw package
// sees plain gpio.PinIO values, and led and watchdog do not even link the
// drivers.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`,
		"github.com/linemq/linemq/hw/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, "periph.io/x/host") && pkg != "github.com/linemq/linemq/hw/board" {
				t.Errorf("%s imports %s; only hw/board may", pkg, imp)
			}
			if strings.HasPrefix(imp, "github.com/linemq/linemq/gateway") {
				t.Errorf("%s imports %s; the gateway imports hw, not the reverse", pkg, imp)
			}
		}
	}
	for _, pkg := range []string{"github.com/linemq/linemq/hw/led", "github.com/linemq/linemq/hw/watchdog"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		if strings.Contains(string(out), "periph.io/x/host") {
			t.Errorf("%s depends on periph.io/x/host", pkg)
		}
	}
}
