package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/storage/bolt"
)

// runDB is `linemq db check|compact`: offline maintenance of the
// persistence file. The broker must be stopped (the file is locked while
// it runs).
//
//	linemq db check [FILE]              verify every page and record
//	linemq db compact [FILE]            rewrite FILE without its free pages
//
// FILE defaults to ./data/linemq.db, or <DIR>/linemq.db with -data-dir DIR.
func runDB(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("linemq db", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "./data", "data directory holding "+gateway.DBFile)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: linemq db check|compact [-data-dir DIR] [FILE]\n\n")
		fs.PrintDefaults()
	}
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	cmd := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	file := filepath.Join(*dataDir, gateway.DBFile)
	switch fs.NArg() {
	case 0:
	case 1:
		file = fs.Arg(0)
	default:
		fs.Usage()
		return 2
	}
	switch cmd {
	case "check":
		if err := bolt.Check(file); err != nil {
			fmt.Fprintf(stderr, "linemq db check: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok\n", file)
		return 0
	case "compact":
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
		// Keep the original until the compacted copy has replaced it: a
		// power cut here leaves one complete file or the other.
		if err := os.Rename(tmp, file); err != nil {
			fmt.Fprintf(stderr, "linemq db compact: %v\n", err)
			return 1
		}
		after, _ := os.Stat(file)
		fmt.Fprintf(stdout, "%s: %d -> %d bytes\n", file, before.Size(), after.Size())
		return 0
	default:
		fmt.Fprintf(stderr, "linemq db: unknown command %q (check or compact)\n", cmd)
		return 2
	}
}
