package bolt

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrClosed is returned by every method of a closed Store except Close.
	ErrClosed = errors.New("storage: store is closed")

	// ErrLocked is returned by Open, Check and Compact when another process
	// (normally another linemq) has the database open for writing.
	ErrLocked = errors.New("database is locked by another linemq")

	// ErrSchemaTooNew is returned by Open for a file written by a newer
	// linemq, whose layout this one cannot know.
	ErrSchemaTooNew = errors.New("database was written by a newer linemq")

	// ErrKeyTooLarge is returned by a write whose client id or topic is
	// longer than bbolt's key limit (32 KiB). It is refused when the write
	// is made, because one bad key in a batch would fail every commit.
	ErrKeyTooLarge = errors.New("storage: client id or topic too long to store")

	// ErrEmptyKey is returned by a write with an empty client id or topic,
	// which bbolt cannot store as a key.
	ErrEmptyKey = errors.New("storage: empty client id or topic")
)

// UnreadableError reports a file that is not a readable linemq database:
// not a bbolt file, truncated, or corrupt. Its message names the file and
// the ways out, because it is what an operator sees when the broker does
// not start.
type UnreadableError struct {
	Path string
	Err  error // the cause, as found
}

// Error names the file, the cause, and what the operator can do.
func (e *UnreadableError) Error() string {
	return fmt.Sprintf("storage: %s is not a readable linemq database (%v): "+
		"run \"linemq db check %s\", restore a backup, or move the file away to start empty",
		e.Path, e.Err, e.Path)
}

// Unwrap returns the cause.
func (e *UnreadableError) Unwrap() error { return e.Err }

// problemText is err as one of CheckError's problems. A panic inside bbolt
// becomes what it says about the file: its own text (an assertion, an
// index out of range) means nothing to an operator.
func problemText(err error) string {
	var p *panicError
	if errors.As(err, &p) {
		return "pages are corrupt: their contents cannot be read"
	}
	return err.Error()
}

// CheckError lists what Check found wrong with a database file.
type CheckError struct {
	Path     string
	Problems []string
}

// maxProblemsShown bounds CheckError's message; Problems holds them all.
const maxProblemsShown = 20

// Error lists the problems, the first maxProblemsShown of them.
func (e *CheckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "storage: check %s: %d problem(s)", e.Path, len(e.Problems))
	for i, p := range e.Problems {
		if i == maxProblemsShown {
			fmt.Fprintf(&b, "\n  ... and %d more", len(e.Problems)-i)
			break
		}
		b.WriteString("\n  - ")
		b.WriteString(p)
	}
	return b.String()
}
