package main

import (
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/update"
)

const updateUsage = `Usage: linemq update keygen [-dir DIR] NAME
       linemq update bundle -key FILE -version VERSION [-arch ARCH] [-o FILE] BINARY
       linemq update verify [-keys DIR] [-arch ARCH] FILE
       linemq update apply [-keys DIR] [-data-dir DIR] FILE
       linemq update status [-data-dir DIR]

Signed update bundles (docs/updates.md).
keygen   writes an ed25519 signing key pair, DIR/NAME.key (keep it off the
         gateways) and DIR/NAME.pub (put it in the gateways' keys directory).
bundle   signs BINARY (a linemq build) into linemq-VERSION-ARCH.bundle; the
         architecture is read from the binary (-arch must agree with it).
verify   checks a bundle against the trusted keys (default ` + config.DefaultUpdateKeysDir + `)
         and the architecture (default this linemq's; -arch any skips it).
apply    verifies a bundle and installs it into the free slot of the data
         directory (default ` + ApplianceDataDir + `), on trial from linemq's next start
         (systemctl restart linemq): committed after update.trial of health,
         rolled back by itself if it crashes, hangs or fails its checks first.
status   prints the slots' state: the version in force, one on trial, the
         last commit and rollback.
Exit status 0: done (verify: the bundle is good); 1: failed or refused;
2: bad command line.
`

// ApplianceDataDir is the appliance's data directory, where linemq.service
// keeps its state and the update slots.
const ApplianceDataDir = "/var/lib/linemq"

// runUpdate is `linemq update keygen|bundle|verify`.
func runUpdate(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, updateUsage)
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("linemq update "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, updateUsage) }
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "linemq update %s: "+format+"\n", append([]any{verb}, a...)...)
		return 1
	}
	// parse parses the flags; when it fails, status is the exit status.
	parse := func(nargs int) (status int, ok bool) {
		if err := fs.Parse(args[1:]); err != nil {
			return flagStatus(err), false
		}
		if fs.NArg() != nargs {
			fmt.Fprintf(stderr, "linemq update %s: want %d argument(s), got %d (see linemq update -h)\n", verb, nargs, fs.NArg())
			return 2, false
		}
		return 0, true
	}
	switch verb {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, updateUsage)
		return 0
	case "keygen":
		dir := fs.String("dir", ".", "where to write NAME.key and NAME.pub")
		if status, ok := parse(1); !ok {
			return status
		}
		name := fs.Arg(0)
		if name == "" || name != filepath.Base(name) {
			return fail("NAME %q: a plain file name", name)
		}
		priv, pub, err := update.GenerateKey()
		if err != nil {
			return fail("%v", err)
		}
		keyFile, pubFile := filepath.Join(*dir, name+".key"), filepath.Join(*dir, name+".pub")
		// O_EXCL: a signing key is never overwritten by accident.
		for _, f := range []struct {
			name string
			mode os.FileMode
			data []byte
		}{{keyFile, 0o600, priv}, {pubFile, 0o644, pub}} {
			if err := writeNew(f.name, f.data, f.mode); err != nil {
				return fail("%v", err)
			}
		}
		k, _ := update.ParsePublicKey(pub)
		fmt.Fprintf(stdout, "linemq update keygen: wrote %s (keep it off the gateways) and %s (key id %s)\n",
			keyFile, pubFile, update.Key{Public: k}.ID())
		return 0
	case "bundle":
		keyFile := fs.String("key", "", "the signing key (linemq update keygen)")
		version := fs.String("version", "", "the version the bundle carries")
		arch := fs.String("arch", "", "the architecture (default: the binary's)")
		out := fs.String("o", "", "the bundle file (default linemq-VERSION-ARCH.bundle)")
		if status, ok := parse(1); !ok {
			return status
		}
		if *keyFile == "" || *version == "" {
			fmt.Fprintln(stderr, "linemq update bundle: -key and -version are required")
			return 2
		}
		bin := fs.Arg(0)
		binArch, err := update.BinaryArch(bin)
		if err != nil {
			return fail("%v", err)
		}
		if *arch != "" && *arch != binArch {
			return fail("-arch %s, but %s is a %s build", *arch, bin, binArch)
		}
		kb, err := os.ReadFile(*keyFile)
		if err != nil {
			return fail("%v", err)
		}
		key, err := update.ParsePrivateKey(kb)
		if err != nil {
			return fail("%s: %v", *keyFile, err)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return fail("%v", err)
		}
		if *out == "" {
			*out = fmt.Sprintf("linemq-%s-%s.bundle", *version, binArch)
		}
		f, err := os.CreateTemp(filepath.Dir(*out), ".bundle-*")
		if err != nil {
			return fail("%v", err)
		}
		defer os.Remove(f.Name())
		err = update.Write(f, key, *version, binArch, time.Now(), []update.Source{{Name: "linemq", Mode: 0o755, Data: data}})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(f.Name(), *out)
		}
		if err != nil {
			return fail("%v", err)
		}
		fmt.Fprintf(stdout, "linemq update bundle: wrote %s (%s for %s, signed by key id %s)\n",
			*out, *version, binArch, update.Key{Public: key.Public().(ed25519.PublicKey)}.ID())
		return 0
	case "verify":
		keysDir := fs.String("keys", config.DefaultUpdateKeysDir, "the directory of trusted public keys (*.pub)")
		arch := fs.String("arch", update.Arch(), `the architecture the bundle must be for ("any": no check)`)
		if status, ok := parse(1); !ok {
			return status
		}
		keys, err := update.LoadKeys(*keysDir)
		if err != nil {
			return fail("%v", err)
		}
		if *arch == "any" {
			*arch = ""
		}
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return fail("%v", err)
		}
		defer f.Close()
		v, err := update.Read(f, keys, *arch, nil)
		if err != nil {
			return fail("%s: %v", fs.Arg(0), err)
		}
		m := v.Manifest
		fmt.Fprintf(stdout, "linemq update verify: %s is good: linemq %s for %s, built %s, signed by %s (key id %s)\n",
			fs.Arg(0), m.Version, m.Arch, m.Created.Format(time.RFC3339), v.Key.Name, v.Key.ID())
		return 0
	case "apply":
		keysDir := fs.String("keys", config.DefaultUpdateKeysDir, "the directory of trusted public keys (*.pub)")
		dataDir := fs.String("data-dir", ApplianceDataDir, "linemq's data directory")
		arch := fs.String("arch", update.Arch(), "the architecture the bundle must be for")
		if status, ok := parse(1); !ok {
			return status
		}
		keys, err := update.LoadKeys(*keysDir)
		if err != nil {
			return fail("%v", err)
		}
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return fail("%v", err)
		}
		defer f.Close()
		slots := &update.Slots{Dir: filepath.Join(*dataDir, update.Dir)}
		v, err := slots.Install(f, keys, *arch)
		if err != nil {
			return fail("%s: %v", fs.Arg(0), err)
		}
		// Run as root on the appliance, the slots must still be the
		// daemon's to run from and to commit or roll back.
		if err := chownLike(slots.Dir, *dataDir); err != nil {
			return fail("%v", err)
		}
		st, _ := slots.Read()
		fmt.Fprintf(stdout, "linemq update apply: linemq %s installed in slot %s, signed by %s (key id %s); it goes on trial at linemq's next start (systemctl restart linemq)\n",
			v.Manifest.Version, st.Trial, v.Key.Name, v.Key.ID())
		return 0
	case "status":
		dataDir := fs.String("data-dir", ApplianceDataDir, "linemq's data directory")
		if status, ok := parse(0); !ok {
			return status
		}
		st, err := (&update.Slots{Dir: filepath.Join(*dataDir, update.Dir)}).Read()
		if err != nil {
			return fail("%v", err)
		}
		fmt.Fprintf(stdout, "in force: %s\n", st.InForce(imageVersion()))
		if st.Trial != "" {
			fmt.Fprintf(stdout, "on trial: %s (slot %s) since %s, started %d time(s)\n", st.TrialVersion, st.Trial, st.TrialSince.Format(time.RFC3339), st.TrialStarts)
		}
		if e := st.LastCommit; e != nil {
			fmt.Fprintf(stdout, "last commit: %s at %s\n", e.Version, e.At.Format(time.RFC3339))
		}
		if e := st.LastRollback; e != nil {
			fmt.Fprintf(stdout, "last rollback: %s at %s: %s\n", e.Version, e.At.Format(time.RFC3339), e.Reason)
		}
		return 0
	}
	fmt.Fprintf(stderr, "linemq update: unknown command %q (keygen, bundle, verify, apply or status; see linemq update -h)\n", verb)
	return 2
}

// writeNew writes a file that must not exist yet.
func writeNew(name string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists: not overwritten", name)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// chownLike gives dir and everything in it the owner and group of ref,
// when they differ and this process may change them (root).
func chownLike(dir, ref string) error {
	fi, err := os.Stat(ref)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(st.Uid), int(st.Gid))
	})
}
