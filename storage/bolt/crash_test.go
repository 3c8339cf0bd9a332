package bolt

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/storage/storetest"
)

const crashChildEnv = "LINEMQ_BOLT_CRASH_CHILD"

// TestKillDuringWrites kills (SIGKILL) a process in the middle of writing
// and committing, several times over the same file. Every message whose
// Sync returned before the kill must be there afterwards, and the file
// must pass Check, which recounts every shared body's references against
// the records (no record without its body, no body leaked). (A process kill keeps what reached the kernel; a power
// cut, which does not, is bbolt's own robustness suite's subject: with
// fsync, bbolt's copy-on-write commit leaves the last committed state.)
func TestKillDuringWrites(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	path := tempDB(t)
	acked := uint64(0)
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringWrites$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		must(t, cmd.Start())
		sc := bufio.NewScanner(out)
		target := acked + 300
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "acked ")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(line, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			acked = n
			if acked >= target {
				break
			}
		}
		// Let it run into its next commit, then kill it.
		time.Sleep(time.Duration(round+1) * 3 * time.Millisecond)
		must(t, cmd.Process.Kill())
		_ = cmd.Wait()
		if acked < target {
			t.Fatalf("child stopped early at %d", acked)
		}

		must(t, Check(path))
		s, err := Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := s.Load(context.Background())
		must(t, err)
		must(t, s.Close())
		ms := snap.Messages["c"]
		if uint64(len(ms)) < acked {
			t.Fatalf("round %d: %d messages after the kill, %d were acknowledged", round, len(ms), acked)
		}
		for i, m := range ms {
			if m.Seq != uint64(i) {
				t.Fatalf("round %d: message %d has Seq %d", round, i, m.Seq)
			}
		}
		// The fan-out's records went in the same commits in all three
		// sessions, and share one body each (Check found every count right).
		fan := snap.Messages["s1"]
		if len(fan) == 0 || len(fan) > 10 {
			t.Fatalf("round %d: %d fan-out records", round, len(fan))
		}
		for _, id := range []string{"s2", "s3"} {
			if len(snap.Messages[id]) != len(fan) {
				t.Fatalf("round %d: %s has %d fan-out records, s1 %d", round, id, len(snap.Messages[id]), len(fan))
			}
			for i, m := range snap.Messages[id] {
				if m.Seq != fan[i].Seq || m.Message != fan[i].Message {
					t.Fatalf("round %d: %s record %d (Seq %d) does not share s1's body", round, id, i, m.Seq)
				}
			}
		}
		t.Logf("round %d: %d acknowledged, %d stored", round, acked, len(ms))
		acked = uint64(len(ms)) // the next child continues from what is stored
	}
}

// crashChild writes messages forever, printing the count after each Sync.
func crashChild(path string) {
	s, err := Open(path, &Options{BatchInterval: 2 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	snap, err := s.Load(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	next := uint64(len(snap.Messages["c"]))
	for {
		for range 5 {
			_ = s.SaveMessage("c", storetest.Message(next, 500))
			_ = s.SaveRetained(broker.NewMessage("t/"+strconv.FormatUint(next%50, 10), []byte("x"), 0, true))
			// A fan-out to three sessions, each acknowledging the one ten
			// messages back: bodies saved and deleted with their counts.
			m := broker.NewMessage("fan", make([]byte, 300), 1, false)
			for _, id := range []string{"s1", "s2", "s3"} {
				_ = s.SaveMessage(id, &broker.MessageRecord{Seq: next, MessageID: next + 1, Message: m, QoS: 1})
				if next >= 10 {
					_ = s.DeleteMessage(id, next-10)
				}
			}
			next++
		}
		sess := storetest.Session("c")
		sess.ExpiryInterval = uint32(next)
		_ = s.SaveSession(sess)
		if err := s.Sync(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Printf("acked %d\n", next)
	}
}
