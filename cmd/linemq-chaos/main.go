// Command linemq-chaos runs linemq's cluster fault suite: for each seed,
// three linemq processes (each hosting an etcd member) under QoS 1 load,
// a seeded schedule of faults, and a check of what the clients saw (see
// package internal/chaos for the model and the invariants).
//
// Usage:
//
//	linemq-chaos -linemq bin/linemq [-seed N] [-runs N] [-duration D]
//	             [-faults kill,stop,leader,move,partition,line,wipe] [-plain]
//	             [-dir DIR] [-v]
//
// Runs use seeds N, N+1, ... N+runs-1. For each it prints the seed, the
// fault schedule (what, when, which node), the figures and whether each
// invariant held. A run that violated an invariant keeps its directory
// (the nodes' logs) and is reproduced with -seed and -runs 1. Partition
// faults need root and ip netns; without them they are skipped with a
// message.
//
// Exit status: 0 if every run held every invariant, 1 if any run violated
// one, 2 for a bad command line or a run the harness could not carry out.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/linemq/linemq/internal/chaos"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("linemq-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("linemq", "bin/linemq", "`PATH` of the linemq binary to test")
	seed := fs.Uint64("seed", 1, "first `SEED`; run k uses SEED+k")
	runs := fs.Int("runs", 1, "number of runs (`N` seeds)")
	duration := fs.Duration("duration", 40*time.Second, "length of each run's fault schedule (the load runs a few seconds longer)")
	faults := fs.String("faults", "kill,stop,leader,move,partition,line,wipe", "comma-separated fault `KINDS`, or all")
	plain := fs.Bool("plain", true, "also run an ordinary persistent QoS 1 subscriber (chaos/#) on every node (-plain=false: share-group members only)")
	dir := fs.String("dir", "", "keep every run's data and logs under `DIR`/seed-N (default: a temporary directory, removed when the run held)")
	verbose := fs.Bool("v", false, "log progress as runs go")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	kinds, err := chaos.ParseFaults(*faults)
	if err != nil {
		fmt.Fprintln(stderr, "linemq-chaos:", err)
		return 2
	}
	if _, err := os.Stat(*bin); err != nil {
		fmt.Fprintf(stderr, "linemq-chaos: %v (build it: go build -o bin/ ./cmd/linemq)\n", err)
		return 2
	}
	path, _ := filepath.Abs(*bin)
	subs := []chaos.SubKind{chaos.ShareGroup}
	if *plain {
		subs = append(subs, chaos.Plain)
	}

	// SIGINT/SIGTERM end the run in progress through its context, so
	// that the processes are killed and the namespaces removed.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var failed []uint64
	status := 0
	for k := range *runs {
		s := *seed + uint64(k)
		cfg := chaos.Config{Linemq: path, Seed: s, Duration: *duration, Faults: kinds, Kinds: subs}
		if *dir != "" {
			cfg.Dir = filepath.Join(*dir, fmt.Sprintf("seed-%d", s))
		}
		if *verbose {
			cfg.Log = stderr
		}
		res, err := chaos.Run(ctx, cfg)
		if res != nil {
			res.Write(stdout)
		}
		if err != nil {
			fmt.Fprintf(stderr, "linemq-chaos: seed %d: %v\n", s, err)
			return 2
		}
		if !res.Report.OK() {
			failed = append(failed, s)
			status = 1
		}
		fmt.Fprintln(stdout)
	}
	if len(failed) > 0 {
		fmt.Fprintf(stdout, "%d of %d runs violated an invariant: seeds %v\n", len(failed), *runs, failed)
	} else {
		fmt.Fprintf(stdout, "all %d runs held every invariant\n", *runs)
	}
	return status
}
