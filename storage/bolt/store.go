package bolt

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/linemq/linemq/broker"
)

// SyncMode says when commits happen and whether they are flushed to the
// medium. The zero value is SyncBatch.
type SyncMode uint8

const (
	// SyncBatch commits the changes collected over BatchInterval in one
	// transaction, with fsync. Sync waits for the batch it is in. Default.
	SyncBatch SyncMode = iota
	// SyncAlways commits as soon as Sync is called instead of waiting for
	// the batch interval, with fsync: lower acknowledgement latency, more
	// commits (and flash wear) under light load, and fewer save/delete
	// pairs cancelled before they reach the disk.
	SyncAlways
	// SyncNone commits every BatchInterval without fsync, and Sync does not
	// wait. THIS IS UNSAFE on power loss: see the package documentation.
	SyncNone
)

var syncModeNames = [...]string{SyncBatch: "batch", SyncAlways: "always", SyncNone: "none"}

// String returns the mode's configuration name.
func (m SyncMode) String() string {
	if int(m) < len(syncModeNames) {
		return syncModeNames[m]
	}
	return fmt.Sprintf("SyncMode(%d)", m)
}

// ParseSyncMode parses "always", "batch" or "none"; "" is SyncBatch.
func ParseSyncMode(s string) (SyncMode, error) {
	if s == "" {
		return SyncBatch, nil
	}
	for m, name := range syncModeNames {
		if s == name {
			return SyncMode(m), nil
		}
	}
	return 0, fmt.Errorf("storage: unknown sync mode %q (want always, batch or none)", s)
}

// MarshalText implements encoding.TextMarshaler, for configuration files.
func (m SyncMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseSyncMode.
func (m *SyncMode) UnmarshalText(b []byte) error {
	v, err := ParseSyncMode(string(b))
	if err == nil {
		*m = v
	}
	return err
}

// DefaultBatchInterval is BatchInterval's default: short enough that a QoS 1
// publisher waits little for its PUBACK, long enough that a busy gateway
// commits at most 100 times a second.
const DefaultBatchInterval = 10 * time.Millisecond

// lockTimeout is how long Open waits for another process's lock on the
// file before reporting ErrLocked.
const lockTimeout = time.Second

// maxBatchOps starts a commit early when this many changes are pending,
// bounding the size of one transaction (etcd's defaultBatchLimit idea).
const maxBatchOps = 10000

// Options configures a Store. The zero value (or a nil *Options) is the
// default configuration.
type Options struct {
	// Sync is the durability mode; see SyncMode and the package
	// documentation. Default SyncBatch.
	Sync SyncMode
	// BatchInterval is how long changes are collected before a commit.
	// Longer saves flash (fewer commits, more cancelled save/delete pairs)
	// and delays every Sync by up to as much. Default DefaultBatchInterval.
	BatchInterval time.Duration
	// Logger receives commit failures and recoveries, migrations and close
	// errors; never anything per message. Default: discard.
	Logger *slog.Logger
	// MaxSize bounds the database file in bytes; 0 means no bound. A commit
	// that would grow the file past it fails as if the disk were full
	// (bbolt's ErrMaxSizeReached, see Sync), which keeps the broker from
	// filling a data partition that other things need. bbolt grows the
	// file in steps (doubling up to 16 MiB, then 16 MiB at a time), so set
	// it to at least 2 MiB and leave room above it on the partition.
	MaxSize int64
}

func (o *Options) validate() error {
	switch {
	case o.Sync > SyncNone:
		return fmt.Errorf("storage: unknown sync mode %d", o.Sync)
	case o.BatchInterval < 0:
		return fmt.Errorf("storage: negative batch interval %v", o.BatchInterval)
	case o.MaxSize < 0 || o.MaxSize > math.MaxInt:
		return fmt.Errorf("storage: max size %d out of range", o.MaxSize)
	}
	return nil
}

// Store is the bbolt implementation of broker.Store. Its write methods only
// record the change in the pending batch; a committer goroutine writes the
// batch in one transaction (commit.go). It is safe for concurrent use.
type Store struct {
	db       *bbolt.DB
	path     string
	mode     SyncMode
	interval time.Duration
	log      *slog.Logger
	pageSize int

	// wasClean: the file had the clean-close mark at Open. cleanMark: it
	// is still on disk; only the committer (then Close) touches it.
	wasClean  bool
	id        string // ID
	cleanMark bool

	// mu guards everything below it. The committer holds it only to swap
	// batches and publish results, never during I/O, so writers never wait
	// on the disk.
	mu       sync.Mutex
	pending  *batch
	spare    *batch // a committed batch, cleared, for reuse
	enq      uint64 // changes made so far; Sync waits until durable reaches its value
	taken    uint64 // enq when the committer last took the pending batch
	durable  uint64 // every change numbered up to this is committed
	inflight *round // the commit under way, if any
	writing  *batch // the batch that commit writes (for Stats.PendingOps)
	next     *round // the commit that will take the pending batch
	closed   bool
	fails    int   // consecutive failed commits
	lastErr  error // most recent commit error
	failing  bool  // the most recent commit failed
	stats    Stats // counters; PendingOps and FileSize are filled in by Stats

	dirty   chan struct{} // a change was made to an empty batch: commit after the interval
	kick    chan struct{} // commit now (SyncAlways Sync, Load, a full batch)
	closing chan struct{}
	done    chan struct{} // the committer has exited

	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the database file at path, migrates it
// to the current schema and starts the committer. A nil opts means the
// defaults. It fails with an error wrapping ErrLocked when another process
// has the file open, an *UnreadableError when it is not a readable linemq
// database, and one wrapping ErrSchemaTooNew for a newer linemq's file.
//
// Open reads the whole file once to make sure it is sound before writing to
// it, so the time it takes grows with the file.
func Open(path string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.BatchInterval == 0 {
		o.BatchInterval = DefaultBatchInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := verifyFile(path, o.Logger); err != nil {
		return nil, err
	}
	db, err := openDB(path, &bbolt.Options{
		Timeout: lockTimeout,
		// The freelist stays synced (one page per commit). NoFreelistSync
		// would save that page, but bbolt would then rebuild the freelist
		// at every Open in a goroutine of its own, which on a corrupt file
		// panics or dereferences a closed transaction where nothing can
		// recover: the broker would crash at every start instead of
		// reporting the file. See the package documentation.
		NoSync:  o.Sync == SyncNone,
		MaxSize: int(o.MaxSize),
	})
	if err != nil {
		return nil, err
	}
	if err := prepareSchema(db, path, o.Logger); err != nil {
		_ = db.Close()
		return nil, err
	}
	var (
		clean bool
		id    string
	)
	err = protect(func() error {
		return db.View(func(tx *bbolt.Tx) error {
			meta := tx.Bucket(bucketMeta.name)
			clean = meta.Get(keyClosedCleanly) != nil
			id = string(meta.Get(keyStoreID))
			return nil
		})
	})
	if err == nil && id == "" {
		id, err = newStoreID(db)
	}
	if err != nil {
		_ = db.Close()
		return nil, &UnreadableError{Path: path, Err: err}
	}
	s := &Store{
		db: db, path: path, mode: o.Sync, interval: o.BatchInterval, log: o.Logger,
		pageSize: db.Info().PageSize, wasClean: clean, cleanMark: clean, id: id,
		pending: newBatch(), next: newRound(),
		dirty: make(chan struct{}, 1), kick: make(chan struct{}, 1),
		closing: make(chan struct{}), done: make(chan struct{}),
	}
	go s.run()
	return s, nil
}

// newStoreID gives a file without one its identity. It is the one write an
// Open may make, once in a file's life.
func newStoreID(db *bbolt.DB) (string, error) {
	id := rand.Text()
	err := protect(func() error {
		return db.Update(func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketMeta.name).Put(keyStoreID, []byte(id))
		})
	})
	return id, err
}

// ID is the file's identity: random, made when the file was (or, for a
// file from before identities, at its first Open by this version), and
// kept for its life. A gateway whose data directory was lost starts with
// another, which is how its cluster peers learn that it no longer has
// the sessions it held (docs/cluster.md).
func (s *Store) ID() string { return s.id }

// openDB opens the bbolt file, turning a panic inside bbolt (some
// corruptions make it panic rather than fail) into an *UnreadableError.
func openDB(path string, bo *bbolt.Options) (db *bbolt.DB, err error) {
	var file *os.File
	bo.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}
	err = protect(func() (err error) {
		db, err = bbolt.Open(path, 0o600, bo)
		return err
	})
	if err == nil {
		return db, nil
	}
	var p *panicError
	if errors.As(err, &p) && file != nil {
		// bbolt gave up half way through Open without closing the file.
		// Its memory map keeps the open file, and so the lock, alive in the
		// kernel after our descriptor is closed: unlock explicitly, so the
		// file can be moved away and a new one opened. The read-only
		// mapping leaks; this happens once, at a start that fails.
		unlock(file)
		_ = file.Close()
	}
	var pe *fs.PathError
	var errno syscall.Errno
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("storage: %s: %w; stop the other process or use another data directory", path, ErrLocked)
	case errors.As(err, &pe), errors.As(err, &errno):
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	return nil, &UnreadableError{Path: path, Err: err}
}

// prepareSchema makes a new file's buckets or migrates an older file, in
// one transaction; it writes nothing to a file that is already current.
func prepareSchema(db *bbolt.DB, path string, log *slog.Logger) error {
	var ready bool
	err := protect(func() error {
		return db.View(func(tx *bbolt.Tx) (err error) {
			ready, err = schemaReady(tx)
			return err
		})
	})
	if err != nil {
		return &UnreadableError{Path: path, Err: err}
	}
	if ready {
		return nil
	}
	err = protect(func() error {
		return db.Update(func(tx *bbolt.Tx) error {
			v, err := readVersion(tx)
			if err != nil {
				return &UnreadableError{Path: path, Err: err}
			}
			if v == 0 {
				log.Info("storage: new database", "path", path, "schema", schemaVersion)
				v = schemaVersion
			}
			if v > schemaVersion {
				return fmt.Errorf("storage: %s has schema version %d, this linemq reads up to %d: %w; "+
					"run a linemq at least as new as the one that wrote it, or move the file away to start empty",
					path, v, schemaVersion, ErrSchemaTooNew)
			}
			if err := migrate(tx, v, path, log); err != nil {
				return err
			}
			if err := createBuckets(tx); err != nil {
				return err
			}
			return writeVersion(tx, schemaVersion)
		})
	})
	var p *panicError
	if errors.As(err, &p) {
		return &UnreadableError{Path: path, Err: err}
	}
	return err
}

// Close commits the pending changes, fsyncs, and closes the file. The
// error reports changes that could not be committed (they are lost) or a
// failure to close. Close is idempotent: later calls return the first
// call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		<-s.done
		err := s.closeErr // set by the committer's final commit
		if err != nil {
			err = fmt.Errorf("storage: closing %s: changes not saved: %w", s.path, err)
			s.log.Error("storage: changes lost at close", "path", s.path, "err", err)
		} else if !s.cleanMark {
			err = protect(func() error {
				return s.db.Update(func(tx *bbolt.Tx) error {
					return tx.Bucket(bucketMeta.name).Put(keyClosedCleanly, []byte{1})
				})
			})
			if err != nil {
				err = fmt.Errorf("storage: closing %s: marking it closed cleanly: %w", s.path, err)
			}
		}
		if s.mode == SyncNone {
			// Even in SyncNone a clean shutdown leaves nothing to chance.
			err = errors.Join(err, s.db.Sync())
		}
		s.closeErr = errors.Join(err, s.db.Close())
	})
	return s.closeErr
}

// checkKey checks a client id or topic before it enters the batch: a key bbolt
// refuses would fail every commit of the batch it is in.
func checkKey(k string) error {
	switch {
	case k == "":
		return ErrEmptyKey
	case len(k) > bbolt.MaxKeySize:
		return ErrKeyTooLarge
	}
	return nil
}

// change records one change under mu. It never waits for I/O: the committer
// holds mu only to swap batches.
func (s *Store) change(f func(b *batch) int) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	first := s.enq == s.taken
	s.stats.Collapsed += uint64(f(s.pending))
	s.enq++
	full := s.pending.ops >= maxBatchOps
	s.mu.Unlock()
	if first {
		poke(s.dirty)
	}
	if full {
		poke(s.kick)
	}
	return nil
}

// SaveSession records a session's own fields (version, expiry, when it
// disconnected, will), replacing what was stored for its client id. It
// ignores r.Subscriptions: each subscription is a record of its own, written
// by SaveSubscription, so that a SUBSCRIBE writes what it changed rather
// than the session's whole list.
func (s *Store) SaveSession(r *broker.SessionRecord) error {
	if err := checkKey(r.ClientID); err != nil {
		return err
	}
	v, err := appendSession(nil, r)
	if err != nil {
		return err
	}
	return s.change(func(b *batch) int { return b.saveSession(r.ClientID, v) })
}

// DeleteSession forgets a session with its subscriptions, messages and
// inbound packet ids. The bodies of its shared messages go with their last
// reference.
func (s *Store) DeleteSession(clientID string) error {
	if err := checkKey(clientID); err != nil {
		return err
	}
	return s.change(func(b *batch) int { return b.deleteSession(clientID) })
}

// SaveMessage records a message of a session, replacing the one with the
// same Seq.
//
// A record with a MessageID shares its body with every record of that id:
// the body is stored once, with the count of records that refer to it, and
// each record stores only its per-delivery fields and the id. Saving one
// more record of a stored id writes that small record and the count. The
// body written is m.Message's; the broker must give every live record of
// an id the same message (it may reuse an id once no live record has it).
// A record with MessageID 0 stores its body inline.
func (s *Store) SaveMessage(clientID string, m *broker.MessageRecord) error {
	if err := checkKey(clientID); err != nil {
		return err
	}
	if m.Message == nil {
		return errors.New("storage: message record has no message")
	}
	v, err := appendMessageRecord(nil, m)
	if err != nil {
		return err
	}
	id, msg := m.MessageID, m.Message
	if id == 0 {
		return s.change(func(b *batch) int { return b.saveMessage(clientID, m.Seq, v) })
	}
	// Encode the body outside the lock, and only if the pending batch does
	// not hold it yet: a publish fanned out to 500 sessions is encoded once
	// per batch, not 500 times, and a large one does not hold up other
	// writers. (If the batch is taken meanwhile, saveBody encodes it for
	// the next one.)
	s.mu.Lock()
	known := s.pending.hasBody(id, msg)
	s.mu.Unlock()
	var enc []byte
	if !known {
		enc = msg.AppendBinary(nil)
	}
	return s.change(func(b *batch) int {
		b.saveBody(id, msg, enc)
		return b.saveMessage(clientID, m.Seq, v)
	})
}

// DeleteMessage forgets a session's message, and the body of a shared
// message with its last reference. If the message was saved in the same
// batch, neither reaches the disk.
func (s *Store) DeleteMessage(clientID string, seq uint64) error {
	if err := checkKey(clientID); err != nil {
		return err
	}
	return s.change(func(b *batch) int { return b.saveMessage(clientID, seq, nil) })
}

// SetInbound records or forgets an inbound QoS 2 packet id of a session.
func (s *Store) SetInbound(clientID string, packetID uint16, pending bool) error {
	if err := checkKey(clientID); err != nil {
		return err
	}
	return s.change(func(b *batch) int { return b.setInbound(clientID, packetID, pending) })
}

// SaveSubscription records one subscription of a session, replacing the
// one with the same filter. The session's record (SaveSession) should be
// saved before, or in the same batch: Load returns subscriptions with their
// session, and drops those of a client id without one (Check reports them
// as orphaned).
func (s *Store) SaveSubscription(clientID string, sub broker.SubscriptionRecord) error {
	if err := checkKey(clientID); err != nil {
		return err
	}
	if err := checkKey(sub.Filter); err != nil {
		return err
	}
	if sub.QoS > 2 || sub.RetainHandling > 2 {
		// It could not be read back: refuse it now rather than fail Load.
		return fmt.Errorf("storage: subscription %q: QoS %d, Retain Handling %d", sub.Filter, sub.QoS, sub.RetainHandling)
	}
	v := appendSubscription(nil, &sub)
	return s.change(func(b *batch) int { return b.saveSubscription(clientID, sub.Filter, v) })
}

// DeleteSubscription forgets a session's subscription to filter. If it was
// saved in the same batch, neither reaches the disk; a filter never stored
// costs nothing.
func (s *Store) DeleteSubscription(clientID, filter string) error {
	if err := checkKey(clientID); err != nil {
		return err
	}
	if err := checkKey(filter); err != nil {
		return err
	}
	return s.change(func(b *batch) int { return b.saveSubscription(clientID, filter, nil) })
}

// SaveRetained records m as its topic's retained message, or clears the
// topic when m's payload is empty.
func (s *Store) SaveRetained(m *broker.Message) error {
	if err := checkKey(m.Topic); err != nil {
		return err
	}
	var v []byte
	if len(m.Payload) > 0 {
		v = m.AppendBinary(nil)
	}
	return s.change(func(b *batch) int { return b.saveRetained(m.Topic, v) })
}

// Load commits anything pending, whatever the mode, and returns everything
// stored. Messages are in Seq order, subscriptions in filter order and
// inbound ids ascending. The records of one shared message all point to one
// *broker.Message, decoded once. A record that cannot be decoded, or whose
// shared body is missing, fails Load with an *UnreadableError naming it;
// Check lists them all.
//
// If the file's reference counts disagree with its records, or it holds
// bodies nothing refers to or the subscriptions of a client without a
// session, Load logs it and repairs the file (integrity.go); the snapshot
// is the same either way.
func (s *Store) Load(ctx context.Context) (*broker.Snapshot, error) {
	if err := s.flush(ctx); err != nil {
		return nil, err
	}
	var (
		snap  *broker.Snapshot
		found []string
	)
	err := protect(func() error {
		return s.db.View(func(tx *bbolt.Tx) error {
			var problems []error
			var counted refCounts
			snap, counted = readSnapshot(tx, func(err error) bool {
				problems = append(problems, err)
				return false // stop at the first
			})
			if len(problems) > 0 {
				return errors.Join(problems...)
			}
			found = faults(tx, counted)
			return nil
		})
	})
	if err != nil {
		return nil, &UnreadableError{Path: s.path, Err: err}
	}
	snap.Unclean = !s.wasClean
	if len(found) > 0 {
		s.log.Warn("storage: repairing inconsistent database", "path", s.path, "faults", len(found), "first", found[0])
		if err := s.change(func(b *batch) int { return b.setRepair() }); err != nil {
			return nil, err
		}
		// A failed repair stays in the pending batch and is retried with
		// it; the snapshot does not depend on it.
		if err := s.flush(ctx); err != nil {
			s.log.Warn("storage: repair not committed yet", "path", s.path, "err", err)
		}
	}
	return snap, nil
}

// readSnapshot reads every record in tx, and counts the references to each
// shared body. A record that cannot be decoded is reported to problem,
// which says whether to go on reading.
func readSnapshot(tx *bbolt.Tx, problem func(error) bool) (*broker.Snapshot, refCounts) {
	snap := &broker.Snapshot{
		Messages: make(map[string][]*broker.MessageRecord),
		Inbound:  make(map[string][]uint16),
	}
	counted := make(refCounts)
	goOn := true
	report := func(b *bucket, key string, err error) {
		goOn = problem(&recordError{bucket: b, key: key, err: err}) && goOn
	}
	byID := make(map[string]*broker.SessionRecord)
	var legacy []*broker.SessionRecord // schema 2 records, with their subscriptions inside
	if sb := tx.Bucket(bucketSessions.name); sb != nil {
		_ = sb.ForEach(func(k, v []byte) error {
			if v == nil {
				report(bucketSessions, quoteKey(k), errors.New("a bucket where a session record belongs"))
			} else if r, err := decodeSession(string(k), v); err != nil {
				report(bucketSessions, quoteKey(k), err)
			} else {
				snap.Sessions = append(snap.Sessions, r)
				byID[r.ClientID] = r
				if len(r.Subscriptions) > 0 {
					legacy = append(legacy, r)
				}
			}
			return stopUnless(goOn)
		})
	}
	forEachClient(tx, bucketSubscriptions, report, func(client string, k, v []byte) {
		sub, err := decodeSubscription(string(k), v)
		if err != nil {
			report(bucketSubscriptions, quoteKey([]byte(client))+"/"+quoteKey(k), err)
			return
		}
		// bbolt's key order is filter order. A client without a session
		// is left out (faults reports it, repair deletes it).
		if r := byID[client]; r != nil {
			r.Subscriptions = append(r.Subscriptions, sub)
		}
	}, &goOn)
	for _, r := range legacy {
		r.Subscriptions = mergeSubscriptions(r.Subscriptions)
	}
	bodies := tx.Bucket(bucketBodies.name)
	type shared struct {
		m   *broker.Message
		err error
	}
	decoded := make(map[uint64]shared)
	forEachClient(tx, bucketMessages, report, func(client string, k, v []byte) {
		key := func() string { return quoteKey([]byte(client)) + "/" + quoteKey(k) }
		if len(k) != 8 {
			report(bucketMessages, key(), errors.New("key is not a Seq"))
			return
		}
		r, err := decodeMessageRecord(beUint64(k), v)
		if err != nil {
			report(bucketMessages, key(), err)
			return
		}
		if id := r.MessageID; id != 0 {
			counted[id]++
			sh, ok := decoded[id]
			if !ok {
				sh.m, sh.err = decodeBody(bodies, id)
				decoded[id] = sh
			}
			if sh.err != nil {
				report(bucketMessages, key(), sh.err)
				return
			}
			r.Message = sh.m // one *Message for every record of the id
		}
		snap.Messages[client] = append(snap.Messages[client], r) // bbolt's key order is Seq order
	}, &goOn)
	forEachClient(tx, bucketInbound, report, func(client string, k, v []byte) {
		if len(k) != 2 {
			report(bucketInbound, quoteKey([]byte(client))+"/"+quoteKey(k), errors.New("key is not a packet id"))
			return
		}
		// Big-endian keys: bbolt's order is ascending packet id.
		snap.Inbound[client] = append(snap.Inbound[client], uint16(k[0])<<8|uint16(k[1]))
	}, &goOn)
	if rb := tx.Bucket(bucketRetained.name); rb != nil && goOn {
		_ = rb.ForEach(func(k, v []byte) error {
			m, err := decodeRetained(k, v)
			if err != nil {
				report(bucketRetained, quoteKey(k), err)
			} else {
				snap.Retained = append(snap.Retained, m)
			}
			return stopUnless(goOn)
		})
	}
	return snap, counted
}

// decodeBody reads and decodes the shared body of message id.
func decodeBody(bodies *bbolt.Bucket, id uint64) (*broker.Message, error) {
	var v []byte
	if bodies != nil {
		v = bodies.Get(idKey(id))
	}
	if v == nil {
		return nil, fmt.Errorf("%w: the body of message %d is missing", ErrCorruptRecord, id)
	}
	m, err := broker.UnmarshalMessage(v)
	if err != nil {
		return nil, fmt.Errorf("%w: the body of message %d: %w", ErrCorruptRecord, id, err)
	}
	return m, nil
}

// mergeSubscriptions sorts a schema 2 session's subscriptions (from its
// record) together with any stored on their own (appended after them),
// keeping the latter for a filter in both. Only Check reads such a file:
// Open migrates it.
func mergeSubscriptions(subs []broker.SubscriptionRecord) []broker.SubscriptionRecord {
	slices.SortStableFunc(subs, func(a, b broker.SubscriptionRecord) int { return strings.Compare(a.Filter, b.Filter) })
	out := subs[:0]
	for i, sub := range subs {
		if i+1 < len(subs) && subs[i+1].Filter == sub.Filter {
			continue
		}
		out = append(out, sub)
	}
	return out
}

// decodeRetained decodes a retained message, checking it is stored under
// its own topic.
func decodeRetained(k, v []byte) (*broker.Message, error) {
	if v == nil {
		return nil, errors.New("a bucket where a retained message belongs")
	}
	m, err := broker.UnmarshalMessage(v)
	if err != nil {
		return nil, err
	}
	if m.Topic != string(k) {
		return nil, fmt.Errorf("message has topic %q", m.Topic)
	}
	return m, nil
}

// forEachClient calls f for each key of each client's nested bucket in b.
func forEachClient(tx *bbolt.Tx, b *bucket, report func(*bucket, string, error), f func(client string, k, v []byte), goOn *bool) {
	parent := tx.Bucket(b.name)
	if parent == nil || !*goOn {
		return
	}
	_ = parent.ForEach(func(ck, cv []byte) error {
		nested := parent.Bucket(ck)
		if cv != nil || nested == nil {
			report(b, quoteKey(ck), errors.New("a value where a client's bucket belongs"))
			return stopUnless(*goOn)
		}
		client := string(ck)
		return nested.ForEach(func(k, v []byte) error {
			if v == nil {
				report(b, quoteKey(ck)+"/"+quoteKey(k), errors.New("unexpected nested bucket"))
			} else {
				f(client, k, v)
			}
			return stopUnless(*goOn)
		})
	})
}

// recordError is a record Load or Check could not read.
type recordError struct {
	bucket *bucket
	key    string // quoted
	err    error
}

func (e *recordError) Error() string {
	return fmt.Sprintf("bucket %s, key %s: %v", e.bucket.name, e.key, e.err)
}

func (e *recordError) Unwrap() error { return e.err }

var errStop = errors.New("stop")

func stopUnless(goOn bool) error {
	if goOn {
		return nil
	}
	return errStop
}

func beUint64(k []byte) uint64 {
	var v uint64
	for _, c := range k {
		v = v<<8 | uint64(c)
	}
	return v
}

// quoteKey shows a key in messages: quoted text, or hex for binary keys.
func quoteKey(k []byte) string {
	for _, c := range k {
		if c < 0x20 || c >= 0x7f {
			return fmt.Sprintf("%x", k)
		}
	}
	return fmt.Sprintf("%q", k)
}

// Stats is a snapshot of a Store's counters.
type Stats struct {
	// BytesWritten is the key and value bytes written by commits (a delete
	// counts its key). Divided by messages, it is the payload side of the
	// wear metric "bytes written per message".
	BytesWritten uint64
	// PageBytesWritten is what bbolt wrote to the file: every page a commit
	// dirtied, plus its meta page. This is what the flash sees (before its
	// own translation layer), and is usually several times BytesWritten
	// because bbolt copies each modified page in full.
	PageBytesWritten uint64
	// Commits is the number of transactions committed. A batch whose
	// changes cancelled out costs no commit.
	Commits uint64
	// CommitErrors is the number of failed commits; each failed batch is
	// retried.
	CommitErrors uint64
	// LastCommitError is the most recent commit error, kept after recovery
	// for the status page; Failing says whether it is current.
	LastCommitError error
	// Failing is true while the most recent commit failed.
	Failing bool
	// Collapsed is the number of changes that never reached the disk
	// because a later change to the same key in the same batch replaced
	// them.
	Collapsed uint64
	// PendingOps is the number of changes not on disk yet, after
	// collapsing: those waiting for a commit, a failed batch waiting to be
	// retried, and the batch a commit under way is writing (a retry in
	// progress must not read as an empty backlog).
	PendingOps int
	// FileSize is the database file's size in bytes.
	FileSize int64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	st.LastCommitError, st.Failing = s.lastErr, s.failing
	st.PendingOps = s.pending.ops
	if s.writing != nil {
		st.PendingOps += s.writing.ops
	}
	s.mu.Unlock()
	if fi, err := os.Stat(s.path); err == nil {
		st.FileSize = fi.Size()
	}
	return st
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Interface guard.
var _ broker.Store = (*Store)(nil)
