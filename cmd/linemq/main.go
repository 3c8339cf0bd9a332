// Command linemq is the linemq MQTT 3.1.1 and 5.0 broker daemon for edge
// gateways.
//
// Usage:
//
//	linemq [-config FILE] [-mqtt-listen ADDR] [-http-listen ADDR]
//	       [-data-dir DIR] [-node-id NAME] [-log-level LEVEL] [-log-format FORMAT]
//	linemq -version
//	linemq db check|compact [-data-dir DIR] [FILE]
//	linemq passwd [-c] [-stdin] [-D] FILE USER
//	linemq import-mosquitto mosquitto.conf > linemq.yaml
//	linemq provision check|apply [-conf DIR] BOOT
//	linemq update keygen|bundle|verify ...
//
// Without -config it runs on the built-in defaults. Flags given on the
// command line override the configuration file; flags left out do not, so
// their defaults below apply only when the file does not set the key
// either. SIGHUP reloads the password and ACL files and the TLS
// certificates without dropping clients. SIGTERM or SIGINT shuts it down gracefully: clients are told
// (v5 DISCONNECT 0x8B) and the process exits 0 within 5 seconds; a second
// signal kills it at once.
//
// Exit status: 0 after a shutdown by signal, 1 when the gateway failed to
// start or failed while running, 64 for a bad command line and 78 for a bad
// configuration (sysexits.h's EX_USAGE and EX_CONFIG), 75 when an update
// uploaded through the API could not be started in place and a new start
// is wanted (EX_TEMPFAIL). After such an upload the program normally
// replaces itself with the new version (exec, same process). Not 2: Go's runtime
// exits 2 after a panic or a fatal signal, the SIGABRT of systemd's
// watchdog among them, and linemq.service must restart those while it
// leaves a configuration that cannot start alone
// (RestartPreventExitStatus=64 78).
// Logs go to stderr one record a line, in slog's text format or, with
// log_format: json, as JSON objects for log collectors; the record
// "listening" carries the bound address (addr), which tells a supervisor
// or a test the port chosen for :0. Once the gateway serves, one record
// "ready" names every address: mqtt= (mqtt.listen), http=, and listeners=
// (the listeners: of the file as URLs, separated by spaces).
//
// All logic lives in package gateway; this file only turns the command line
// into a configuration and signals into a cancelled context.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/provision"
	"github.com/linemq/linemq/gateway/update"
)

// version is the release, set at build time with
// -ldflags "-X main.version=v1.2.3". (It must be a variable: -X cannot set
// a constant.)
var version = "dev"

// flagKeys maps each configuration flag to the key it overrides.
var flagKeys = map[string]string{
	"mqtt-listen": "mqtt.listen",
	"http-listen": "http.listen",
	"data-dir":    "data_dir",
	"node-id":     "node_id",
	"log-level":   "log_level",
	"log-format":  "log_format",

	"cluster-listen":             "cluster.listen",
	"cluster-replicas":           "cluster.replicas",
	"etcd-endpoints":             "cluster.etcd.endpoints",
	"etcd-embed":                 "cluster.etcd.embed",
	"etcd-name":                  "cluster.etcd.name",
	"etcd-peer-listen":           "cluster.etcd.peer_listen",
	"etcd-client-listen":         "cluster.etcd.client_listen",
	"etcd-initial-cluster":       "cluster.etcd.initial_cluster",
	"etcd-initial-cluster-state": "cluster.etcd.initial_cluster_state",
}

// The daemon's exit statuses for problems a restart cannot mend (see the
// package comment for why they are not 2).
const (
	exitUsage  = 64 // EX_USAGE: a bad command line
	exitConfig = 78 // EX_CONFIG: a configuration that cannot be used
	// exitRestart asks the service manager for a new start: an uploaded
	// update was installed but could not be started in place.
	exitRestart = 75 // EX_TEMPFAIL
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "db" {
		return runDB(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "cluster" {
		return runCluster(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "reload" {
		return runReload(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "passwd" {
		return runPasswd(args[1:], os.Stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "provision" {
		return runProvision(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "update" {
		return runUpdate(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "import-mosquitto" {
		return runImportMosquitto(args[1:], stdout, stderr)
	}
	fs, configFile, showVersion := newFlagSet(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage // the flag package has printed the problem and the usage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "linemq: unexpected argument %q (flags only; see -help)\n", fs.Arg(0))
		return exitUsage
	}
	if *showVersion {
		fmt.Fprintf(stdout, "linemq %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	}

	cfg, err := configure(fs, *configFile)
	if err != nil {
		// Printed bare: the messages are "file:line: key: problem" lines,
		// which editors and CI logs turn into links.
		fmt.Fprintln(stderr, err)
		return exitConfig
	}

	log := newLogger(stderr, cfg)
	log.Info("linemq starting", "version", version, "go", runtime.Version(), "config", *configFile)

	// An installed update runs in place of this program (docs/updates.md).
	eff := cfg.WithDefaults()
	slots := &update.Slots{Dir: filepath.Join(eff.DataDir, update.Dir), Image: imageVersion()}
	slot := os.Getenv(update.SlotEnv)
	if slot == "" {
		startInstalled(slots, args, log)
	} else {
		log.Info("update: running the installed version", "slot", slot, "version", version)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		// Once the first signal has started the shutdown, restore the
		// default action, so that a second one kills a shutdown that hangs.
		<-ctx.Done()
		stop()
	}()

	// Caught from before the start: a reload that comes while the gateway
	// starts (systemctl reload as it boots) waits for it rather than
	// killing the process, SIGHUP's default.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	progress := new(update.Progress)
	opts := gateway.Options{Config: cfg, Logger: log, Version: version,
		Update: gateway.UpdateOptions{Slots: slots, Slot: slot, Trial: progress}}
	// The outcome of the last provisioning set sits beside the
	// configuration it made (the appliance's /etc/linemq), or, while the
	// appliance still runs its factory file, in the directory a set would
	// have made.
	for _, dir := range []string{filepath.Dir(*configFile), DefaultConfDir} {
		if *configFile == "" || opts.Provisioned != nil {
			break
		}
		st, err := provision.ReadStatus(dir)
		if err != nil {
			log.Warn("reading the provisioning status", "dir", dir, "err", err)
		}
		opts.Provisioned = st
	}
	if st := opts.Provisioned; st != nil && !st.Applied {
		log.Warn("the last provisioning set was refused; running on the configuration before it", "problems", strings.Join(st.Problems, "; "))
	}
	var trial <-chan error
	g, err := gateway.Start(ctx, opts)
	if err != nil {
		log.Error("linemq failed", "err", err)
		return 1
	}
	select {
	case <-g.Ready():
		args := []any{"version", version, "data_dir", cfg.DataDir}
		if a := g.MQTTAddr(); a != nil {
			args = append(args, "mqtt", a.String())
		}
		if a := g.HTTPAddr(); a != nil {
			args = append(args, "http", a.String())
		}
		// After mqtt= and http=, which scripts and tests read by position;
		// one key for all, since a file may list any number of them.
		if us := g.ListenerURLs(); len(us) > 0 {
			args = append(args, "listeners", strings.Join(us, " "))
		}
		log.Info("ready", args...)
		if slot != "" {
			trial = watchTrial(ctx, slots, slot, eff, g, progress, log)
		}
	case <-ctx.Done():
	case <-g.Done():
	}
	code := 0
	restart := false
	committed := func() {
		log.Info("update: committed: this version stays after restarts", "version", version)
		g.UpdateCommitted()
	}
	stopTrial := func() {
		if trial == nil {
			return
		}
		// The trial's watcher ends with ctx; wait for it so that its last
		// word and this one do not cross.
		stop()
		if err := <-trial; err == nil {
			committed()
		} else if err := slots.Stopped(slot); err != nil {
			log.Error("update: recording the stop during the trial", "err", err)
		} else {
			// Stopped on purpose: the next start tries this version again
			// rather than rolling it back.
			log.Info("update: stopped during the trial; it starts again at the next start", "version", version)
		}
	}
wait:
	for {
		select {
		case err := <-trial:
			trial = nil
			var failed *update.TrialFailed
			switch {
			case err == nil:
				committed()
			case errors.As(err, &failed):
				// Exiting with a failure makes systemd start linemq again,
				// and that start brings the version before back.
				log.Error("update: giving up the trial; the version before comes back at the next start", "version", version, "reason", failed.Reason)
				code = 1
				break wait
			case ctx.Err() == nil:
				log.Error("update: the trial could not be recorded", "err", err)
			}
		case <-hup:
			if err := g.Reload(); err != nil {
				log.Error("reload failed; the previous files stay in force", "err", err)
			} else {
				log.Info("reloaded")
			}
		case <-ctx.Done():
			log.Info("shutting down", "cause", context.Cause(ctx))
			stopTrial()
			break wait
		case <-g.RestartRequested():
			// An admin uploaded a bundle (POST /api/v1/update): stop as
			// for SIGTERM, then start the version now on trial.
			log.Info("update: restarting into the uploaded version")
			stopTrial()
			g.Restarting()
			restart = true
			break wait
		case <-g.Done():
			break wait
		}
	}
	if err := g.Close(); err != nil {
		log.Error("linemq failed", "err", err)
		return 1
	}
	log.Info("linemq stopped")
	if restart {
		startInstalled(slots, args, log)
		// Only when the new version could not be started: exiting with
		// a failure makes systemd start linemq again, and that start
		// finds what is to run (the version before, after a rollback).
		log.Error("update: the uploaded version did not start; exiting so that the service manager restarts linemq")
		return exitRestart
	}
	return code
}

// startInstalled replaces this program with the installed update, if there
// is one: the version on trial at its first start, else the committed one
// (update.Slots.Start). exec keeps the process id, so systemd's notify
// protocol and watchdog follow the new program. It returns when this
// program is the one to run: nothing installed, a rollback to the image's
// version, or installed versions that cannot be used (logged).
func startInstalled(slots *update.Slots, args []string, log *slog.Logger) {
	for {
		slot, rollback, err := slots.Start()
		if rollback != nil {
			log.Warn("update: rolled back", "version", rollback.Version, "reason", rollback.Reason)
		}
		if err != nil {
			log.Error("update: the installed versions cannot be used; running this one", "err", err)
			return
		}
		if slot == "" {
			if st, err := slots.Read(); err == nil && st.Committed != "" && !st.OnImage(slots.Image) {
				log.Info("update: the root file system's linemq replaces the committed version, which was committed on another image",
					"image", slots.Image, "committed_version", st.CommittedVersion, "committed_on", st.CommittedImage)
			}
			return
		}
		bin := slots.Binary(slot)
		err = syscall.Exec(bin, append([]string{bin}, args...), slotEnv(os.Environ(), slot, slots.Image))
		// Exec returns only when it failed.
		log.Error("update: starting the installed version failed", "slot", slot, "err", err)
		if st, rerr := slots.Read(); rerr != nil || st.Trial != slot {
			return // the committed version: this one runs instead
		}
		// A trial that cannot start: the next Start rolls it back.
		if err := slots.Fail(slot, "it could not be started: "+err.Error()); err != nil {
			log.Error("update: recording the failed start", "err", err)
			return
		}
	}
}

// imageVersion is the version of the root file system's own linemq: this
// program's, when it is the one systemd started; the versions it starts
// learn it from update.ImageEnv.
func imageVersion() string {
	if v := os.Getenv(update.ImageEnv); v != "" {
		return v
	}
	return version
}

// slotEnv is env with update.SlotEnv set to slot and update.ImageEnv to
// image, replacing the values a slot's program restarting into another
// slot was started with (the first of two would be the one read).
func slotEnv(env []string, slot, image string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if !strings.HasPrefix(kv, update.SlotEnv+"=") && !strings.HasPrefix(kv, update.ImageEnv+"=") {
			out = append(out, kv)
		}
	}
	return append(out, update.SlotEnv+"="+slot, update.ImageEnv+"="+image)
}

// watchTrial starts the trial of this version if it is the one on trial
// in slot, and returns the channel its outcome arrives on (nil when this
// version is committed already). e is the configuration with its
// defaults.
func watchTrial(ctx context.Context, slots *update.Slots, slot string, e *config.Config, g *gateway.Gateway, p *update.Progress, log *slog.Logger) <-chan error {
	st, err := slots.Read()
	if err != nil {
		log.Error("update: reading the slots' state", "err", err)
		return nil
	}
	if st.Trial != slot {
		return nil
	}
	trial := time.Duration(e.Update.Trial)
	interval := time.Duration(e.Health.ProbeInterval)
	// A failing check is given three probes to recover, as the watchdog
	// feeding would (hw.watchdog).
	grace := 3 * interval
	log.Info("update: on trial", "version", version, "trial", trial, "since", st.TrialSince)
	out := make(chan error, 1)
	go func() { out <- slots.Watch(ctx, slot, trial, grace, min(interval, time.Second), g.Health().Healthy, p) }()
	return out
}

// newFlagSet defines the command line.
func newFlagSet(stderr io.Writer) (fs *flag.FlagSet, configFile *string, showVersion *bool) {
	fs = flag.NewFlagSet("linemq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configFile = fs.String("config", "", "read the configuration from `FILE` (YAML)")
	// The defaults shown are the configuration's own; a flag that is not
	// given leaves the file's value alone.
	fs.String("mqtt-listen", config.DefaultMQTTListen, "MQTT listener address `ADDR`, host:port; empty disables it (mqtt.listen)")
	fs.String("http-listen", config.DefaultHTTPListen, "status page listener address `ADDR`; empty disables it (http.listen)")
	fs.String("data-dir", config.DefaultDataDir, "`DIR` for persistent state (data_dir)")
	fs.String("node-id", "", "`NAME` of this node (node_id; default: the host name)")
	fs.String("log-level", config.DefaultLogLevel, "`LEVEL` of logs: debug, info, warn or error (log_level)")
	fs.String("log-format", config.DefaultLogFormat, "`FORMAT` of logs: text or json (log_format)")
	fs.String("cluster-listen", "", "`ADDR` of the node-to-node transport, host:port; turns clustering on (cluster.listen)")
	fs.Int("cluster-replicas", config.DefaultReplicas, "`N` other gateways keeping a copy of each persistent session; 0: none (cluster.replicas)")
	fs.String("etcd-endpoints", "", "comma-separated client `URLS` of an external etcd (cluster.etcd.endpoints)")
	fs.Bool("etcd-embed", false, "run an etcd member inside this gateway (cluster.etcd.embed)")
	fs.String("etcd-name", "", "`NAME` of the embedded etcd member; default: the node id (cluster.etcd.name)")
	fs.String("etcd-peer-listen", "", "peer `URL` of the embedded member, e.g. http://10.0.0.11:2380 (cluster.etcd.peer_listen)")
	fs.String("etcd-client-listen", "", "client `URL` of the embedded member, e.g. http://10.0.0.11:2379 (cluster.etcd.client_listen)")
	fs.String("etcd-initial-cluster", "", "every member as `name=peer-url,...` (cluster.etcd.initial_cluster)")
	fs.String("etcd-initial-cluster-state", "new", "`STATE` new, or existing to join a running cluster as a replacement (cluster.etcd.initial_cluster_state)")
	showVersion = fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs, configFile, showVersion
}

// usage heads the output of linemq -h; the flags follow.
const usage = `Usage:
  linemq [-config FILE] [flags]    run the broker
  linemq db check|compact [FILE]   check or compact the database offline
                                   (linemq db -h for its flags)
  linemq cluster forget -etcd-endpoints URLS NODE
                                   take a gateway out of the line on purpose
                                   (the others stop listing it as missing)
  linemq passwd [-c] FILE USER     add or change a user in a password file
                                   (Mosquitto's format; linemq passwd -h)
  linemq import-mosquitto FILE     print the linemq.yaml equivalent to a
                                   mosquitto.conf (what it cannot carry over
                                   goes to standard error)
  linemq provision check|apply BOOT
                                   check or apply a gateway's provisioning set
  linemq update keygen|bundle|verify
                                   signed update bundles (linemq update -h)
  linemq -version                  print the version

Flags override the configuration file:

`

// newLogger returns the daemon's logger, writing to w in the format and at
// the level cfg sets.
func newLogger(w io.Writer, cfg *config.Config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.Level()}
	if cfg.LogFormat == config.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// configure loads the configuration file (or the defaults), applies the
// flags that were given explicitly, and validates the result.
func configure(fs *flag.FlagSet, file string) (*config.Config, error) {
	cfg := config.Default()
	if file != "" {
		var err error
		if cfg, err = config.Load(file); err != nil {
			return nil, err
		}
	}
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		if key, ok := flagKeys[f.Name]; ok {
			v, origin := f.Value.String(), "flag -"+f.Name
			if f.Name == "etcd-endpoints" {
				// A list in the file: each comma-separated URL an item.
				var eps []string
				for ep := range strings.SplitSeq(v, ",") {
					if ep = strings.TrimSpace(ep); ep != "" {
						eps = append(eps, ep)
					}
				}
				errs = append(errs, cfg.OverrideList(key, eps, origin))
				return
			}
			errs = append(errs, cfg.Override(key, v, origin))
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}
