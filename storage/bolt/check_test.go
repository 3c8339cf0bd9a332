package bolt

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/storage/storetest"
)

// fill writes n messages of size bytes for each of clients sessions and
// closes the store, returning the file's path.
func fill(t *testing.T, clients, n, size int) string {
	t.Helper()
	path := tempDB(t)
	s := openT(t, path, nil)
	for c := range clients {
		id := string(rune('a' + c))
		must(t, s.SaveSession(storetest.Session(id)))
		for i := range uint64(n) {
			must(t, s.SaveMessage(id, storetest.Message(i, size)))
		}
	}
	must(t, s.SaveRetained(broker.NewMessage("status", []byte("up"), 1, true)))
	must(t, s.Close())
	return path
}

// wantUnreadable checks err is an *UnreadableError that names the file and
// the way out.
func wantUnreadable(t *testing.T, err error, path string) {
	t.Helper()
	var ue *UnreadableError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v (%T), want *UnreadableError", err, err)
	}
	msg := err.Error()
	for _, want := range []string{path + " is not a readable linemq database", `run "linemq db check ` + path + `"`, "restore a backup", "move the file away"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error %q lacks %q", msg, want)
		}
	}
}

// openOrLoad opens path and loads it, returning the first error.
func openOrLoad(t *testing.T, path string) error {
	s, err := Open(path, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	_, err = s.Load(ctxT(t))
	return err
}

func TestGarbageFile(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 100, 4096, 64 << 10} {
		path := filepath.Join(t.TempDir(), "linemq.db")
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		must(t, os.WriteFile(path, b, 0o600))
		_, err := Open(path, nil)
		wantUnreadable(t, err, path)
		if err := Check(path); err == nil {
			t.Fatalf("Check of %d bytes of garbage: no error", size)
		}
		// The failed Open released the file: it can be moved away and a
		// new database started in its place.
		must(t, os.Rename(path, path+".bad"))
		s := openT(t, path, nil)
		must(t, s.Close())
	}
}

func TestTruncatedFile(t *testing.T) {
	path := fill(t, 2, 200, 300)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.Truncate(path, fi.Size()/2))
	_, err = Open(path, nil)
	wantUnreadable(t, err, path)
	if !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("Open of a truncated file: %v", err)
	}
	err = Check(path)
	var ce *CheckError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("Check of a truncated file: %v", err)
	}
}

// TestCorruptPages overwrites pages in the middle of a valid file in
// several ways. Some make bbolt panic, some fault, some leave pages that
// read as nonsense: each must end in an *UnreadableError from Open or Load
// (never a crash), and Check must report it.
func TestCorruptPages(t *testing.T) {
	good := fill(t, 3, 150, 300)
	orig, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	pages := len(orig) / page
	rnd := rand.New(rand.NewPCG(3, 4))
	corruptions := map[string]func(b []byte){
		"random pages": func(b []byte) {
			for p := 2; p < pages/2; p++ {
				for i := p * page; i < (p+1)*page; i++ {
					b[i] = byte(rnd.Uint32())
				}
			}
		},
		"zeroed pages": func(b []byte) { clear(b[2*page : pages/2*page]) },
		"page headers": func(b []byte) { // flags and overflow of every data page
			for p := 2; p < pages; p++ {
				b[p*page+8], b[p*page+9] = 0xff, 0xff
				b[p*page+12], b[p*page+13] = 0xff, 0x7f
			}
		},
		"page ids": func(b []byte) { // child page ids pointing far away
			for p := 2; p < pages; p++ {
				for i := p*page + 16; i < (p+1)*page; i += 16 {
					b[i+4], b[i+5], b[i+6], b[i+7] = 0xff, 0xff, 0xff, 0x0f
				}
			}
		},
		"record bytes": func(b []byte) { // values garbled, structure intact
			for p := 2; p < pages; p++ {
				for i := p*page + 600; i < p*page+700; i++ {
					b[i] ^= 0x5a
				}
			}
		},
	}
	for name, corrupt := range corruptions {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "linemq.db")
			b := append([]byte(nil), orig...)
			corrupt(b)
			must(t, os.WriteFile(path, b, 0o600))
			wantUnreadable(t, openOrLoad(t, path), path)
			err := Check(path)
			var ce *CheckError
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("Check: %v", err)
			}
			t.Logf("Check found %d problem(s), first: %s", len(ce.Problems), ce.Problems[0])
			// Whatever bbolt did on the way, the file is free to be moved
			// away and a new database started.
			must(t, os.Rename(path, path+".bad"))
			must(t, openT(t, path, nil).Close())
		})
	}
}

func TestCheckGood(t *testing.T) {
	path := fill(t, 2, 50, 100)
	if err := Check(path); err != nil {
		t.Fatal(err)
	}
	if err := Check(filepath.Join(t.TempDir(), "missing.db")); err == nil {
		t.Fatal("Check of a missing file: no error")
	}
}

// TestCompact: after a backlog is deleted the file keeps its size; Compact
// writes a smaller copy with the same contents.
func TestCompact(t *testing.T) {
	path := tempDB(t)
	s := openT(t, path, nil)
	for i := range uint64(2000) {
		must(t, s.SaveMessage("a", storetest.Message(i, 1000)))
	}
	must(t, s.SaveSession(storetest.Session("a")))
	must(t, s.Sync(ctxT(t)))
	for i := range uint64(1990) {
		must(t, s.DeleteMessage("a", i))
	}
	must(t, s.Close())
	before, _ := os.Stat(path)

	dst := filepath.Join(t.TempDir(), "compacted.db")
	must(t, Compact(path, dst))
	after, _ := os.Stat(dst)
	if after.Size()*4 > before.Size() {
		t.Fatalf("compacted file %d bytes, from %d", after.Size(), before.Size())
	}
	t.Logf("compacted %d -> %d bytes", before.Size(), after.Size())
	must(t, Check(dst))
	c := openT(t, dst, nil)
	snap, err := c.Load(ctxT(t))
	if err != nil || len(snap.Messages["a"]) != 10 || len(snap.Sessions) != 1 {
		t.Fatalf("compacted contents: %v %v", snap, err)
	}
	if err := Compact(path, dst); err == nil {
		t.Fatal("Compact over an existing file: no error")
	}
}
