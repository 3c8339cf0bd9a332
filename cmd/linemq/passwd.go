package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"golang.org/x/term"

	"github.com/linemq/linemq/gateway/auth"
)

// passwdUsage heads the usage of `linemq passwd`; the flags follow.
const passwdUsage = `Usage: linemq passwd [-c] [-stdin] [-D] [-iterations N] FILE USER

Adds USER to the password file FILE, or changes their password, writing the
$7$ (PBKDF2-SHA512) line that mosquitto_passwd 2.x writes: the file stays
usable by Mosquitto, and Mosquitto's files are usable here (auth.password_file).
The password is asked for twice on the terminal, or read as one line from
standard input with -stdin (for scripts: never put a password in a command
line, where ps and the shell history see it).

The file is replaced atomically, keeping its mode and owner; a new one is
made readable by its owner only. Send linemq SIGHUP to load it.

Flags:
`

// maxPasswordLen is the longest password an MQTT CONNECT can carry.
const maxPasswordLen = 65535

// runPasswd is `linemq passwd`. It returns the exit status: 0 when the
// file was written, 1 when it could not be, 2 for a bad command line.
func runPasswd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("linemq passwd", flag.ContinueOnError)
	flags.SetOutput(stderr)
	create := flags.Bool("c", false, "create FILE, replacing any file already there")
	fromStdin := flags.Bool("stdin", false, "read the password from standard input (one line) instead of the terminal")
	del := flags.Bool("D", false, "delete USER instead of setting a password")
	iterations := flags.Int("iterations", auth.DefaultIterations, "PBKDF2 iteration `N`: each login costs N rounds of HMAC-SHA512 (mosquitto_passwd uses 101)")
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), passwdUsage)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return flagStatus(err)
	}
	if flags.NArg() != 2 {
		fmt.Fprintf(stderr, "linemq passwd: want FILE and USER (got %d arguments; see linemq passwd -h)\n", flags.NArg())
		return 2
	}
	file, user := flags.Arg(0), flags.Arg(1)
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "linemq passwd: "+format+"\n", args...)
		return 1
	}
	switch {
	case *create && *del:
		fmt.Fprintln(stderr, "linemq passwd: -c and -D together would leave an empty file")
		return 2
	case *iterations < 1 || *iterations > auth.MaxIterations:
		fmt.Fprintf(stderr, "linemq passwd: -iterations %d out of range (1..%d)\n", *iterations, auth.MaxIterations)
		return 2
	}
	if err := auth.CheckUsername(user); err != nil {
		fmt.Fprintf(stderr, "linemq passwd: %v\n", err)
		return 2
	}

	var old []byte
	info, err := os.Stat(file)
	switch {
	case err == nil && info.IsDir():
		return fail("%s is a directory", file)
	case err == nil && !*create:
		if old, err = os.ReadFile(file); err != nil {
			return fail("%v", err)
		}
	case errors.Is(err, fs.ErrNotExist) && !*create:
		return fail("%s does not exist (-c creates it)", file)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fail("%v", err)
	}

	var line string
	if !*del {
		pw, err := readPassword(stdin, stderr, *fromStdin)
		if err != nil {
			return fail("%v", err)
		}
		h, err := auth.NewHash(pw, *iterations)
		clear(pw)
		if err != nil {
			return fail("%v", err)
		}
		line = user + ":" + h
	}
	out, found := setUser(old, user, line)
	if *del && !found {
		return fail("user %q is not in %s", user, file)
	}
	if err := replaceFile(file, out, info); err != nil {
		return fail("%v", err)
	}
	switch {
	case *del:
		fmt.Fprintf(stdout, "%s: deleted %s\n", file, user)
	case found:
		fmt.Fprintf(stdout, "%s: changed the password of %s\n", file, user)
	default:
		fmt.Fprintf(stdout, "%s: added %s\n", file, user)
	}
	return 0
}

// readPassword reads the new password: one line of stdin with -stdin,
// otherwise twice from the terminal without echo.
func readPassword(stdin io.Reader, stderr io.Writer, fromStdin bool) ([]byte, error) {
	var pw []byte
	if fromStdin {
		r := bufio.NewReaderSize(stdin, 4096)
		line, err := r.ReadSlice('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, errors.New("password line longer than 4096 bytes")
			}
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		pw = bytes.TrimRight(line, "\r\n")
		pw = append([]byte(nil), pw...)
	} else {
		f, ok := stdin.(*os.File)
		if !ok || !term.IsTerminal(int(f.Fd())) {
			return nil, errors.New("standard input is not a terminal: give the password on it with -stdin")
		}
		fd := int(f.Fd())
		fmt.Fprint(stderr, "Password: ")
		first, err := term.ReadPassword(fd)
		fmt.Fprintln(stderr)
		if err != nil {
			return nil, err
		}
		fmt.Fprint(stderr, "Reenter password: ")
		second, err := term.ReadPassword(fd)
		fmt.Fprintln(stderr)
		if err != nil {
			return nil, err
		}
		same := bytes.Equal(first, second)
		clear(second)
		if !same {
			clear(first)
			return nil, errors.New("the passwords do not match")
		}
		pw = first
	}
	switch {
	case len(pw) == 0:
		return nil, errors.New("empty password")
	case len(pw) > maxPasswordLen:
		return nil, fmt.Errorf("password longer than %d bytes, more than MQTT can carry", maxPasswordLen)
	}
	return pw, nil
}

// setUser returns the password file old with user's line replaced by
// line, or added at the end when user has none; an empty line deletes the
// user. Every other line is kept as it is. found reports whether user was
// in old.
func setUser(old []byte, user, line string) (out []byte, found bool) {
	var b bytes.Buffer
	for l := range strings.Lines(string(old)) {
		name, _, ok := strings.Cut(strings.TrimRight(l, "\r\n"), ":")
		if ok && name == user {
			if !found && line != "" {
				b.WriteString(line + "\n")
			}
			found = true
			continue
		}
		b.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			b.WriteString("\n")
		}
	}
	if !found && line != "" {
		b.WriteString(line + "\n")
	}
	return b.Bytes(), found
}

// replaceFile writes data to file through a temporary file in the same
// directory and a rename, so that a reader (linemq reloading on SIGHUP)
// sees the old file or the new one, never half of one. The new file keeps
// the mode and owner of the one it replaces (info); a new one is 0600.
func replaceFile(file string, data []byte, info os.FileInfo) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, nothing to remove
	mode := fs.FileMode(0o600)
	if info != nil {
		mode = info.Mode().Perm()
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if uid, gid, ok := owner(info); ok && (uid != os.Geteuid() || gid != os.Getegid()) {
		// Run as root on a file the daemon's user owns: hand the new one
		// to that user too, or the daemon could no longer read it.
		if err := tmp.Chown(uid, gid); err != nil {
			tmp.Close()
			return fmt.Errorf("keeping the owner of %s: %w", file, err)
		}
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// owner returns the user and group ids of the file info describes, where
// the system has them (its Sys() has Uid and Gid fields, as on every Unix).
func owner(info os.FileInfo) (uid, gid int, ok bool) {
	if info == nil {
		return 0, 0, false
	}
	v := reflect.Indirect(reflect.ValueOf(info.Sys()))
	if v.Kind() != reflect.Struct {
		return 0, 0, false
	}
	u, g := v.FieldByName("Uid"), v.FieldByName("Gid")
	if !u.IsValid() || !g.IsValid() || !u.CanUint() || !g.CanUint() {
		return 0, 0, false
	}
	return int(u.Uint()), int(g.Uint()), true
}
