package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/linemq/linemq/internal/durable"
)

// verifyFile makes sure an existing file can be read before Open writes to
// it: its pages all lie within the file, every bucket, key and value can be
// read, and bbolt's consistency check passes. bbolt trusts its file and may
// panic, or fault on a page past the end of a truncated file, deep inside a
// later transaction or in a goroutine of its own, where nothing can
// recover; a commit on a file whose freelist claims a page in use would
// overwrite it. Here the whole file is read in this goroutine, under
// protect, so a bad file becomes an *UnreadableError instead of a crashed
// broker or a worse file.
func verifyFile(path string, log *slog.Logger) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // a new database
	case err != nil:
		return fmt.Errorf("storage: %w", err)
	case fi.IsDir():
		return fmt.Errorf("storage: %s is a directory, not a database file", path)
	case fi.Size() == 0:
		return nil // created but never initialised: bbolt initialises it
	}
	var problems []string
	err = inspect(path, fi.Size(), func(err error) {
		if isLeak(err) {
			log.Warn("storage: database has leaked pages (space only; Compact reclaims it)", "path", path, "detail", err)
			return
		}
		problems = append(problems, err.Error())
	})
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		if len(problems) > 3 {
			problems = append(problems[:3], fmt.Sprintf("and %d more", len(problems)-3))
		}
		// One line: this ends up in a log line and a status page.
		return &UnreadableError{Path: path, Err: errors.New(strings.Join(problems, "; "))}
	}
	return nil
}

// inspect reads a database file in two read-only passes and reports what
// is wrong with its structure to problem. It returns an error only when the
// file cannot be opened at all (not bbolt, locked).
//
// The first pass checks the file's size against its pages and reads every
// bucket, key and value in this goroutine, under protect. Only then does
// the second load the freelist (at Open, also under protect) and run
// bbolt's tx.Check, which reads in a goroutine of its own where a fault
// could not be recovered: by then every page it reads is known readable.
func inspect(path string, size int64, problem func(error)) error {
	db, err := openDB(path, &bbolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return err
	}
	err = protect(func() error {
		return db.View(func(tx *bbolt.Tx) error {
			if err := checkSize(tx, size); err != nil {
				return err
			}
			return touchAll(tx)
		})
	})
	_ = db.Close()
	if err != nil {
		problem(err)
		return nil
	}
	db, err = openDB(path, &bbolt.Options{ReadOnly: true, PreLoadFreelist: true, Timeout: lockTimeout})
	if err != nil {
		var ue *UnreadableError
		if errors.As(err, &ue) {
			problem(fmt.Errorf("loading the freelist: %w", ue.Err))
			return nil
		}
		return err
	}
	defer db.Close()
	err = protect(func() error {
		return db.View(func(tx *bbolt.Tx) error {
			for err := range tx.Check() {
				problem(err)
			}
			return nil
		})
	})
	if err != nil {
		problem(err)
	}
	return nil
}

// isLeak reports tx.Check's "unreachable unfreed" finding: pages neither
// in use nor free. They waste space but endanger nothing, so they do not
// stop Open.
func isLeak(err error) bool { return strings.Contains(err.Error(), "unreachable unfreed") }

// checkSize reports a file shorter than the pages its meta page refers to:
// a truncated copy, or a file system that lost its tail. Reading those
// pages would fault.
func checkSize(tx *bbolt.Tx, size int64) error {
	if need := tx.Size(); need > size {
		return fmt.Errorf("file is %d bytes but its pages reach byte %d: truncated", size, need)
	}
	return nil
}

// touchAll reads every key and value of every bucket, so that a broken page
// shows now rather than later.
func touchAll(tx *bbolt.Tx) error {
	var sink byte
	var walk func(b *bbolt.Bucket) error
	walk = func(b *bbolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if len(k) > 0 {
				sink ^= k[len(k)-1]
			}
			if v == nil {
				if nb := b.Bucket(k); nb != nil {
					return walk(nb)
				}
				return nil
			}
			// One byte per page reaches every overflow page of a long value.
			for i := 0; i < len(v); i += 1024 {
				sink ^= v[i]
			}
			return nil
		})
	}
	err := tx.ForEach(func(_ []byte, b *bbolt.Bucket) error { return walk(b) })
	_ = sink
	return err
}

// Check reads the database file at path and reports what is wrong with it
// as a *CheckError listing every problem: a truncated file, pages that
// cannot be read, bbolt's own consistency check (tx.Check: every page
// reachable once, freelist sound), a missing bucket, every record that
// does not decode or whose shared body is missing, reference counts that
// disagree with the records, bodies nothing refers to, and subscriptions
// of a client id without a session. It opens the file read-only, so it
// fails with ErrLocked while a linemq has it open: stop the broker, or
// check a copy. It is "linemq db check".
func Check(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("storage: check: %w", err)
	}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if err := inspect(path, fi.Size(), func(err error) { add("structure: %s", problemText(err)) }); err != nil {
		var ue *UnreadableError
		if !errors.As(err, &ue) {
			return err
		}
		// What is wrong with the file, not a failure to check it; and the
		// UnreadableError's advice is to run this very check.
		add("not a linemq database, or its first pages are damaged (%s)", problemText(ue.Err))
	}
	if len(problems) == 0 {
		// The structure is sound: the records can be read safely.
		if err := checkRecords(path, add); err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		return &CheckError{Path: path, Problems: problems}
	}
	return nil
}

// checkRecords decodes every record of a structurally sound file.
func checkRecords(path string, add func(string, ...any)) error {
	db, err := openDB(path, &bbolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return err
	}
	defer db.Close()
	err = protect(func() error {
		return db.View(func(tx *bbolt.Tx) error {
			v, err := readVersion(tx)
			switch {
			case err != nil:
				add("%v", err)
				return nil
			case v > schemaVersion:
				add("schema version %d is newer than this linemq's (%d): records not checked", v, schemaVersion)
				return nil
			}
			if v == schemaVersion {
				// An older file lacks the buckets Open's migration adds.
				for _, b := range buckets {
					if tx.Bucket(b.name) == nil {
						add("bucket %q (%s) is missing", b.name, b.about)
					}
				}
			}
			if v == 1 {
				// Open migrates it. Only the retained messages differ.
				checkRetainedV1(tx, add)
			}
			_, counted := readSnapshot(tx, func(err error) bool {
				var re *recordError
				if v == 1 && errors.As(err, &re) && re.bucket == bucketRetained {
					return true // checked above, as schema 1
				}
				add("%v", err)
				return true
			})
			for _, f := range faults(tx, counted) {
				add("%s (Load and Compact repair this)", f)
			}
			return nil
		})
	})
	if err != nil {
		add("reading records: %s", problemText(err))
	}
	return nil
}

// Compact copies the database at src into a new file dst, leaving out the
// free pages, and repairs the copy as Load would (reference counts, bodies
// nothing refers to, orphaned subscriptions). bbolt reuses freed pages but
// never shrinks its file, so a file that once held a long backlog stays
// that large; Compact is how to get the space back: stop linemq, compact,
// move dst over src. dst must not exist. src is opened read-only, so
// Compact fails with ErrLocked while a linemq has it open.
func Compact(src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("storage: compact: %s already exists", dst)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: compact: %w", err)
	}
	if err := verifyFile(src, slog.New(slog.DiscardHandler)); err != nil {
		return err
	}
	sdb, err := openDB(src, &bbolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return err
	}
	defer sdb.Close()
	// The copy is synced once at the end rather than per transaction: until
	// then it is not in use, and a crash just leaves a file to delete.
	ddb, err := openDB(dst, &bbolt.Options{Timeout: lockTimeout, NoSync: true})
	if err != nil {
		return err
	}
	err = protect(func() error { return bbolt.Compact(ddb, sdb, compactTxSize) })
	if err == nil {
		err = protect(func() error { return ddb.Update(repairCurrent) })
	}
	if err == nil {
		err = ddb.Sync()
	}
	err = errors.Join(err, ddb.Close())
	if err == nil {
		err = durable.SyncDir(filepath.Dir(dst))
	}
	if err != nil {
		_ = os.Remove(dst)
		return fmt.Errorf("storage: compacting %s into %s: %w", src, dst, err)
	}
	return nil
}

// repairCurrent repairs a file at the current schema version (Compact's
// copy): an older one is migrated, and repaired, by Open.
func repairCurrent(tx *bbolt.Tx) error {
	if v, err := readVersion(tx); err != nil || v != schemaVersion {
		return err
	}
	var w written
	return repair(tx, &w)
}

// compactTxSize bounds the memory Compact's transactions use.
const compactTxSize = 4 << 20
