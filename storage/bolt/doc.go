// Package bolt is linemq's persistence: broker.Store on one bbolt
// (go.etcd.io/bbolt) file, normally <data-dir>/linemq.db.
//
// # Basics
//
// Open the file, give the Store to the broker, Close it after the broker
// has stopped:
//
//	st, err := bolt.Open("/var/lib/linemq/linemq.db", &bolt.Options{Sync: bolt.SyncBatch})
//	if err != nil {
//		return err // names the file and what to do about it
//	}
//	defer st.Close()
//
// The file holds persistent sessions (their own fields and will), their
// subscriptions, the QoS 1 and 2 messages queued or in flight to them,
// their unreleased inbound QoS 2 packet ids, and retained messages;
// schema.go lists the buckets. Messages are stored as the broker's own
// bytes (broker.Message.AppendBinary); records in a compact versioned
// binary form (codec.go). The layout has a schema version; Open migrates
// older files in one transaction and refuses newer ones (migrate.go).
//
// # Shared bodies and subscriptions
//
// A message fanned out to many sessions is stored once. Its records (one
// per session: Seq, packet id, flags, share group, subscription ids) name
// the body by broker.MessageRecord.MessageID; the body is kept under that
// id with a count of the records that refer to it, and goes with the last
// of them. The counts are derived at commit from the records written and
// deleted, in the same transaction, so group commit's cancelling applies to
// shared records as to any other, and no crash can leave a record without
// its body (integrity.go). Load decodes each body once: the records of one
// id share one *broker.Message. A record with MessageID 0 carries its body.
//
// Each subscription is a record of its own under its filter, written by
// SaveSubscription and DeleteSubscription: a SUBSCRIBE writes what it
// changed, whatever the number of subscriptions the session has.
// SaveSession stores the session's own fields and ignores
// SessionRecord.Subscriptions.
//
// # Durability model
//
// The write methods (SaveSession, SaveMessage, DeleteMessage, ...) never
// touch the disk: they record the change in a pending batch and return. A
// committer goroutine writes the batch in one bbolt transaction (group
// commit) BatchInterval (10 ms) after its first change. Sync blocks until
// every change made before it is committed, and the broker calls Sync
// before it acknowledges a QoS 1 or 2 message that a persistent session
// needs. Changes to the same key within one batch collapse to the last
// one, so a message saved and acknowledged within one interval is never
// written at all.
//
// bbolt commits by copy-on-write and a checksummed meta page: a power cut
// during a commit leaves the file as of the previous commit, never half a
// batch. What each SyncMode keeps through a power cut:
//
//   - SyncBatch (default): everything Sync returned nil for. What may be
//     lost is what nobody waited for: up to BatchInterval of changes (plus
//     a failing batch, see Errors). For the broker that means acknowledged
//     deliveries (the message is sent again: a duplicate, which QoS 1
//     allows and QoS 2 resolves), recent subscription changes, retained
//     messages and wills, none of which it Syncs. Each Sync waits up to
//     BatchInterval plus the fsync.
//   - SyncAlways: the same guarantee; Sync commits at once instead of
//     waiting out the interval: acknowledgements are faster under light
//     load, at the price of more commits (more flash wear) and fewer
//     save/delete pairs cancelled in memory. Changes nobody Syncs still wait
//     for the interval.
//   - SyncNone: THIS IS UNSAFE ON POWER LOSS. Commits happen every
//     BatchInterval without fsync, and Sync returns at once. A crash of
//     linemq alone loses nothing committed (the kernel holds the pages),
//     but a power cut loses whatever the kernel had not yet written back
//     (typically up to 30 s), acknowledged messages included, and because
//     bbolt's crash safety relies on the fsync ordering this mode skips, it
//     can leave a file that Open refuses as unreadable. For disposable data
//     or a gateway with a UPS.
//
// All of this assumes a medium that keeps what fsync flushed. Many cheap
// SD cards do not (they acknowledge a flush from a volatile cache); use
// industrial or pSLC cards for data that matters.
//
// # Flash wear
//
// bbolt rewrites every page from the root to each key a commit changes,
// plus the freelist and meta pages: four 4 KiB pages for a commit of a
// single small change, whatever its size (BenchmarkSaveDeleteMessage: 16
// KiB written per message when each message gets its own commit).
// Batching shares those pages: with 64 publishers and acknowledged
// messages, about 60 messages go in one commit and the file sees about
// 1.2 KiB per message; a message acknowledged within the batch interval
// costs nothing. Stats reports BytesWritten (keys and values) and
// PageBytesWritten (pages) for a wear metric.
//
// A fan-out costs one small record per session plus one body:
// BenchmarkFanOutBacklog (500 offline sessions, 1,000 messages of 1 KiB,
// one commit per publish) writes 8.5 MB of keys and values into a 34 MB
// file, where bodies inline wrote 534 MB into 1.05 GB. Pages fall less
// (7.6 GB to 4.5 GB): each commit still rewrites the leaf, and its
// bucket's root, of every session it queues to. Commits that carry several
// publishes share those pages.
//
// bbolt's NoFreelistSync would save the freelist page, a quarter of a
// small commit. It is not used: bbolt then rebuilds the freelist at every
// Open by walking the file in a goroutine of its own, and on a corrupt
// file that goroutine panics or dereferences a closed transaction, which
// no caller can recover: the broker would crash at every start instead of
// reporting the file.
//
// # Errors
//
// A commit that fails (disk full, bbolt's ErrMaxSizeReached for
// Options.MaxSize, an I/O error) fails every Sync waiting for it, with the
// cause wrapped (errors.Is(err, syscall.ENOSPC)). Its changes are kept and
// retried, whole, by the following commits, first after BatchInterval and
// then at growing intervals up to a second; once one succeeds a Sync
// returns nil again. Nothing acknowledged before the failure is lost, and
// nothing is lost by the failure itself unless the process stops before a
// retry succeeds (Close reports that). A batch is retried whole because it
// is atomic on disk: splitting it could store a state that never existed
// in the broker. A failing batch only shrinks when later changes cancel
// parts of it (the broker deleting the records of a publish it refused).
//
// A file that cannot be read (not bbolt, truncated, corrupt) makes Open
// fail with an *UnreadableError that names the file and the ways out:
// "linemq db check" (Check), restoring a backup, or moving the file away.
// bbolt trusts its file and may panic, or fault on a page past the end of
// a truncated file; Open, Load and Check recover from both, and Open reads
// and checks the whole file first so that it does not meet a bad page
// later, inside a commit.
//
// # Caveats
//
//   - One process: Open locks the file, and a second Open (another linemq,
//     or Check and Compact while linemq runs) fails with ErrLocked after a
//     second.
//   - The file never shrinks: bbolt reuses freed pages but keeps its size
//     (it grows by doubling up to 16 MiB, then 16 MiB at a time). After a
//     large backlog, stop linemq and Compact.
//   - Open reads the whole file and runs bbolt's consistency check on it:
//     start-up time grows with the file, read at the medium's speed (tens
//     of MB/s for an SD card).
//   - The pending batch lives in memory until it commits; while commits
//     fail it grows with every change (Stats.PendingOps).
//   - Writes with an empty or over-32-KiB client id or topic are refused
//     when made (ErrEmptyKey, ErrKeyTooLarge): in a batch they would fail
//     every commit.
//   - Records returned by Load are the caller's: they share nothing with
//     the file or the Store. The records of one MessageID share their
//     *broker.Message, which the broker treats as immutable anyway.
//   - Load may write: it repairs reference counts that disagree with the
//     records, bodies nothing refers to and the subscriptions of a client
//     without a session (none of which a commit leaves; a bug or an edited
//     file might), and logs that it did.
package bolt
