package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/storage/bolt"
)

// dbUsage heads the usage of `linemq db`; the flags follow.
const dbUsage = `Usage: linemq db check|compact [-data-dir DIR] [FILE]

Offline maintenance of the persistence file. Stop linemq first: it locks the
file while it runs.

  check     verify every page and record of FILE
  compact   rewrite FILE without its free pages, to give the space back

FILE defaults to DIR/` + gateway.DBFile + `.

Flags:
`

// runDB is `linemq db check|compact`. It returns the exit status: 0 for a
// sound file (check) or a compacted one (compact), 1 when the file is
// damaged or the operation failed, 2 for a bad command line.
func runDB(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("linemq db", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", config.DefaultDataDir, "data `DIR` holding "+gateway.DBFile)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), dbUsage)
		fs.PrintDefaults()
	}
	// Flags may come before the command (linemq db -data-dir DIR check) as
	// well as after it: parse once for each side.
	if err := fs.Parse(args); err != nil {
		return flagStatus(err)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	cmd := fs.Arg(0)
	if cmd == "help" {
		fs.Usage()
		return 0
	}
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return flagStatus(err)
	}
	file := filepath.Join(*dataDir, gateway.DBFile)
	switch fs.NArg() {
	case 0:
	case 1:
		file = fs.Arg(0)
	default:
		fmt.Fprintf(stderr, "linemq db %s: one FILE at most (got %d arguments; see linemq db -h)\n", cmd, fs.NArg())
		return 2
	}
	var run func(file string, stdout, stderr io.Writer) int
	switch cmd {
	case "check":
		run = dbCheck
	case "compact":
		run = dbCompact
	default:
		fmt.Fprintf(stderr, "linemq db: unknown command %q (check or compact; see linemq db -h)\n", cmd)
		return 2
	}
	fi, err := os.Stat(file)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "linemq db %s: %v\n", cmd, err)
		return 1
	case fi.IsDir():
		fmt.Fprintf(stderr, "linemq db %s: %s is a directory: give the database file (%s), or the directory with -data-dir\n",
			cmd, file, filepath.Join(file, gateway.DBFile))
		return 1
	}
	return run(file, stdout, stderr)
}

// flagStatus is the exit status after a failed fs.Parse, which has printed
// the problem, or the usage for -h.
func flagStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// dbCheck is `linemq db check FILE`.
func dbCheck(file string, stdout, stderr io.Writer) int {
	err := bolt.Check(file)
	var ce *bolt.CheckError
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "%s: ok\n", file)
		return 0
	case errors.As(err, &ce):
		// The list, then what to do about it: the reader of this output is
		// deciding whether the gateway can start on this file.
		fmt.Fprintf(stderr, "linemq db check: %s is damaged (%s):\n", file, plural(len(ce.Problems), "problem"))
		for _, p := range ce.Problems {
			fmt.Fprintf(stderr, "  - %s\n", p)
		}
		fmt.Fprintf(stderr, "To recover, restore a backup of %s, or move it away: linemq then starts with an empty database.\n", file)
		return 1
	default:
		// The check could not run (locked, permissions): nothing is known
		// about the file yet.
		fmt.Fprintf(stderr, "linemq db check: %v\n", err)
		return 1
	}
}

// dbCompact is `linemq db compact FILE`.
func dbCompact(file string, stdout, stderr io.Writer) int {
	before, err := os.Stat(file)
	if err != nil {
		fmt.Fprintf(stderr, "linemq db compact: %v\n", err)
		return 1
	}
	tmp := file + ".compact"
	os.Remove(tmp)
	if err := bolt.Compact(file, tmp); err != nil {
		os.Remove(tmp)
		fmt.Fprintf(stderr, "linemq db compact: %v\n", err)
		return 1
	}
	// Keep the original until the compacted copy has replaced it: a power
	// cut here leaves one complete file or the other.
	if err := os.Rename(tmp, file); err != nil {
		fmt.Fprintf(stderr, "linemq db compact: %v\n", err)
		return 1
	}
	after, err := os.Stat(file)
	if err != nil {
		fmt.Fprintf(stderr, "linemq db compact: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %d -> %d bytes\n", file, before.Size(), after.Size())
	return 0
}

// plural is "1 problem" or "n problems".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
