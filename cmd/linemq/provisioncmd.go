package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/provision"
	"github.com/linemq/linemq/hw"
)

// DefaultConfDir is the appliance's configuration directory on the data
// partition, which linemq sees as /etc/linemq.
const DefaultConfDir = "/var/lib/linemq/config"

// runProvision is `linemq provision check|apply BOOT`: it checks a
// provisioning set (docs/appliance.md) and applies it, all of it or none.
func runProvision(args []string, stdout, stderr io.Writer) int {
	usage := func() {
		fmt.Fprintf(stderr, `Usage: linemq provision check|apply [-conf DIR] BOOT

Checks the provisioning set in BOOT (linemq.yaml and the linemq/ folder of a
gateway's boot partition, docs/appliance.md) against the configuration
directory DIR (default %s, which linemq sees as /etc/linemq).
apply then makes it DIR's content at once, deletes its files from BOOT and
writes linemq-applied.txt there; a set with any problem changes nothing,
and the problems go to stderr and to BOOT/linemq-error.txt.
Exit status 0: applied (or nothing to apply, or check found no problem);
1: refused; 2: bad command line.
`, DefaultConfDir)
	}
	if len(args) == 0 || (args[0] != "check" && args[0] != "apply") {
		usage()
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("provision "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = usage
	conf := fs.String("conf", DefaultConfDir, "the configuration directory")
	noTrial := fs.Bool("no-trial", false, "skip starting a gateway on the new configuration (check only)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		usage()
		return 2
	}
	boot := fs.Arg(0)
	var trial func(string) error
	if !*noTrial {
		trial = trialStart
	}
	if verb == "check" {
		return provisionCheck(boot, *conf, trial, stdout, stderr)
	}
	st, err := provision.Apply(boot, *conf, provision.Options{Trial: trial})
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "linemq provision: %v\n", err)
		return 1
	case st == nil:
		fmt.Fprintf(stdout, "linemq provision: no provisioning set in %s\n", boot)
		return 0
	}
	fmt.Fprintf(stdout, "linemq provision: applied %s into %s\n", strings.Join(st.Files, ", "), *conf)
	return 0
}

// provisionCheck checks without applying: the set is staged in a
// temporary directory, removed after.
func provisionCheck(boot, conf string, trial func(string) error, stdout, stderr io.Writer) int {
	stage, err := os.MkdirTemp("", "linemq-provision-")
	if err != nil {
		fmt.Fprintf(stderr, "linemq provision: %v\n", err)
		return 1
	}
	defer os.RemoveAll(stage)
	set, problems, err := provision.Verify(boot, conf, stage, trial)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "linemq provision: %v\n", err)
		return 1
	case len(problems) > 0:
		fmt.Fprintf(stderr, "linemq provision: %v\n", &provision.Error{Problems: problems})
		return 1
	case len(set.Files) == 0:
		fmt.Fprintf(stdout, "linemq provision: no provisioning set in %s\n", boot)
		return 0
	}
	fmt.Fprintf(stdout, "linemq provision: the set in %s holds (%d files)\n", boot, len(set.Files))
	return 0
}

// trialStart starts a gateway on the staged configuration for a moment,
// as the appliance did before applying a linemq.yaml: a file that names
// an address the gateway does not have, or anything else that only
// starting finds, is refused rather than applied to fail at every boot.
// Its MQTT and HTTP shortcuts go to loopback ports and its data to a
// temporary directory beside the stage, on the data partition: not in
// /tmp, which linemq-config.service may find read-only (the appliance's
// root) or in RAM too small for a store; a clustered configuration is not
// started (it would join the line's etcd), only checked.
func trialStart(stage string) error {
	b, err := os.ReadFile(filepath.Join(stage, provision.ConfigFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil // the factory configuration, unchanged
	}
	if err != nil {
		return err
	}
	cfg, err := config.Parse([]byte(strings.ReplaceAll(string(b), provision.EtcPrefix, stage+"/")), provision.ConfigFile)
	if err != nil {
		return err
	}
	if cfg.Cluster.Listen != "" {
		return nil
	}
	data, err := os.MkdirTemp(filepath.Dir(stage), ".linemq-trial-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(data)
	cfg.DataDir = data
	cfg.MQTT.Listen = new("127.0.0.1:0")
	cfg.HTTP.Listen = new("127.0.0.1:0")
	cfg.HW = hw.Config{} // the LEDs and the watchdog belong to the running gateway
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := gateway.Start(ctx, gateway.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	return g.Close()
}
