package bolt

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/linemq/linemq/storage/storetest"
)

// reportWear reports the store's writes per message since before.
func reportWear(b *testing.B, s *Store, before Stats, msgs int) {
	b.Helper()
	if err := s.flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	after := s.Stats()
	n := float64(msgs)
	b.ReportMetric(float64(after.BytesWritten-before.BytesWritten)/n, "disk-B/msg")
	b.ReportMetric(float64(after.PageBytesWritten-before.PageBytesWritten)/n, "page-B/msg")
	b.ReportMetric(float64(after.Commits-before.Commits)/n, "commits/msg")
}

// BenchmarkSaveDeleteMessage is one QoS 1 message through a persistent
// session, one at a time: SaveMessage (300-byte payload), Sync (as the
// broker does before PUBACK), DeleteMessage (the subscriber's PUBACK).
// disk-B/msg is key and value bytes written (Stats.BytesWritten), page-B/msg
// the pages bbolt wrote (what the flash sees). In SyncNone, Sync does not
// wait, so the delete lands in the same batch and the pair cancels out.
//
// "batch/acked-in-interval" is the same message acknowledged before its
// batch commits (Save, Delete, then Sync): the common case on a LAN with a
// 10 ms batch, and the reason batching saves the flash.
func BenchmarkSaveDeleteMessage(b *testing.B) {
	run := func(b *testing.B, mode SyncMode, ackFirst bool) {
		s := openT(b, tempDB(b), &Options{Sync: mode})
		ctx := context.Background()
		m := storetest.Message(0, 300)
		before := s.Stats()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			m.Seq = uint64(i)
			if err := s.SaveMessage("client", m); err != nil {
				b.Fatal(err)
			}
			if ackFirst {
				_ = s.DeleteMessage("client", m.Seq)
			}
			if err := s.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			if !ackFirst {
				_ = s.DeleteMessage("client", m.Seq)
			}
		}
		b.StopTimer()
		reportWear(b, s, before, b.N)
	}
	for _, mode := range modes {
		b.Run(mode.String(), func(b *testing.B) { run(b, mode, false) })
	}
	b.Run("batch/acked-in-interval", func(b *testing.B) { run(b, SyncBatch, true) })
}

// BenchmarkSaveMessageParallel is many publishers at once, each saving a
// 300-byte message to its own session and waiting for Sync: group commit
// shares one transaction and one fsync among them (commits/msg).
//
// In "backlog" the messages stay (offline subscribers: each session's
// bucket grows past what bbolt stores inline, so every commit rewrites a
// leaf page per session it touches); in "acked" each message is deleted
// after its Sync, as a connected subscriber's PUBACK would, and the
// sessions' buckets stay small.
func BenchmarkSaveMessageParallel(b *testing.B) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways} {
		for _, acked := range []bool{false, true} {
			name := mode.String() + "/backlog"
			if acked {
				name = mode.String() + "/acked"
			}
			b.Run(name, func(b *testing.B) {
				s := openT(b, tempDB(b), &Options{Sync: mode})
				ctx := context.Background()
				var ids atomic.Uint64
				before := s.Stats()
				b.ReportAllocs()
				b.SetParallelism(32) // 32 publishers per CPU
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					id := fmt.Sprintf("client-%d", ids.Add(1))
					m := storetest.Message(0, 300)
					for pb.Next() {
						m.Seq++
						if err := s.SaveMessage(id, m); err != nil {
							b.Error(err)
							return
						}
						if err := s.Sync(ctx); err != nil {
							b.Error(err)
							return
						}
						if acked {
							_ = s.DeleteMessage(id, m.Seq)
						}
					}
				})
				b.StopTimer()
				reportWear(b, s, before, b.N)
			})
		}
	}
}
