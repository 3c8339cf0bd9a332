package bolt

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/storage/storetest"
)

// TestSubscriptionWrites: a SUBSCRIBE writes its own subscription, not the
// session's list: the bytes one more subscription costs do not grow with
// the subscriptions already stored, and an UNSUBSCRIBE writes its key.
func TestSubscriptionWrites(t *testing.T) {
	s := openT(t, tempDB(t), &Options{Sync: SyncAlways, BatchInterval: time.Hour})
	ctx := ctxT(t)
	must(t, s.SaveSession(storetest.Session("a")))
	must(t, s.Sync(ctx))
	one := func(i int) uint64 {
		before := s.Stats().BytesWritten
		must(t, s.SaveSubscription("a", broker.SubscriptionRecord{Filter: fmt.Sprintf("dev/%06d/+/state", i), QoS: 1, SubscriptionID: uint32(i)}))
		must(t, s.Sync(ctx))
		return s.Stats().BytesWritten - before
	}
	first := one(0)
	for i := 1; i < 2000; i++ {
		one(i)
	}
	last := one(2000)
	// 19 key bytes and at most 4 of value; the first also creates the bucket.
	if last > 24 || first > last+8 {
		t.Fatalf("one subscription wrote %d bytes after 2,000 (the first: %d)", last, first)
	}
	before := s.Stats().BytesWritten
	must(t, s.DeleteSubscription("a", "dev/000007/+/state"))
	must(t, s.Sync(ctx))
	if w := s.Stats().BytesWritten - before; w != uint64(len("dev/000007/+/state")) {
		t.Fatalf("an unsubscribe wrote %d bytes", w)
	}
	// SaveSession leaves them alone, and writes no more for having 2,000.
	before = s.Stats().BytesWritten
	rec := storetest.Session("a")
	must(t, s.SaveSession(rec))
	must(t, s.Sync(ctx))
	if w := s.Stats().BytesWritten - before; w > 200 {
		t.Fatalf("SaveSession wrote %d bytes", w)
	}
	snap, err := s.Load(ctx)
	must(t, err)
	if n := len(snap.Sessions[0].Subscriptions); n != 2000 {
		t.Fatalf("%d subscriptions loaded, want 2000", n)
	}
}

// TestRefusedSubscriptions: what could not be stored or read back is
// refused when the write is made.
func TestRefusedSubscriptions(t *testing.T) {
	s := openT(t, tempDB(t), nil)
	for _, sub := range []broker.SubscriptionRecord{
		{Filter: ""},
		{Filter: string(make([]byte, 40000))},
		{Filter: "a", QoS: 3},
		{Filter: "a", RetainHandling: 3},
	} {
		if err := s.SaveSubscription("c", sub); err == nil {
			t.Errorf("SaveSubscription(%.10q, QoS %d, RH %d): no error", sub.Filter, sub.QoS, sub.RetainHandling)
		}
	}
	if err := s.DeleteSubscription("", "a"); err == nil {
		t.Error("DeleteSubscription with an empty client id: no error")
	}
	if st := s.Stats(); st.PendingOps != 0 {
		t.Fatalf("refused writes reached the batch: %+v", st)
	}
}

// BenchmarkSubscribe is issue 9 item 10's case: 200,000 subscriptions
// made one SUBSCRIBE at a time on one session (override the number with
// LINEMQ_BENCH_SUBS). "pipelined" is a client that does not wait for each
// SUBACK: the broker writes each subscription and a syncer goroutine
// Syncs for all that arrived meanwhile (group commit), as broker/syncer.go
// does. "one-by-one" waits for each SUBACK (a Sync per subscription, in
// SyncAlways: a commit each). One iteration is the whole run; run it with
// -benchtime=1x.
func BenchmarkSubscribe(b *testing.B) {
	n := 200000
	if v := os.Getenv("LINEMQ_BENCH_SUBS"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil {
			b.Fatal(err)
		}
	}
	for _, pipelined := range []bool{true, false} {
		name := "one-by-one"
		mode := SyncAlways
		if pipelined {
			name, mode = "pipelined", SyncBatch
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				s := openT(b, tempDB(b), &Options{Sync: mode})
				ctx := context.Background() // 200,000 commits take minutes
				must(b, s.SaveSession(storetest.Session("c")))
				must(b, s.Sync(ctx))
				base := s.Stats()
				need := make(chan struct{}, 1)
				synced := make(chan struct{})
				go func() {
					defer close(synced)
					for range need {
						if err := s.Sync(ctx); err != nil {
							b.Error(err)
						}
					}
				}()
				start := time.Now()
				for i := range n {
					sub := broker.SubscriptionRecord{Filter: fmt.Sprintf("dev/%06d/+/state", i), QoS: 1, SubscriptionID: uint32(i + 1)}
					if err := s.SaveSubscription("c", sub); err != nil {
						b.Fatal(err)
					}
					if pipelined {
						select {
						case need <- struct{}{}:
						default:
						}
					} else if err := s.Sync(ctx); err != nil {
						b.Fatal(err)
					}
				}
				close(need)
				<-synced
				must(b, s.Sync(ctx))
				elapsed := time.Since(start)
				st := s.Stats()
				written, pages := st.BytesWritten-base.BytesWritten, st.PageBytesWritten-base.PageBytesWritten
				b.ReportMetric(elapsed.Seconds(), "total-s")
				b.ReportMetric(float64(written)/1e6, "written-MB")
				b.ReportMetric(float64(pages)/1e6, "page-MB")
				b.ReportMetric(float64(st.Commits-base.Commits), "commits")
				b.Logf("%s: %d subscriptions in %v: %.1f MB written (keys and values), %.1f MB of pages, %d commits, file %.1f MB",
					name, n, elapsed.Round(time.Millisecond), float64(written)/1e6, float64(pages)/1e6, st.Commits-base.Commits, float64(st.FileSize)/1e6)
			}
		})
	}
}
