package durable

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "sub", "state.json")
	for _, data := range []string{"old", "new"} {
		if err := WriteFile(name, []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(name); err != nil || string(got) != data {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
	}
	if fi, _ := os.Stat(name); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(filepath.Dir(name)); len(ents) != 1 {
		t.Errorf("%d entries beside the file: a temporary file stayed", len(ents))
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("SyncDir of a missing directory")
	}
}
