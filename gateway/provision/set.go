package provision

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/gateway/certs"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/update"
)

// Names in a set. ConfigFile is at the top of the boot partition, the
// rest in Folder.
const (
	ConfigFile = "linemq.yaml"
	Folder     = "linemq"
	// SystemDir is the folder of the configuration directory that holds
	// the system's files (network, host name, NTP, SSH keys).
	SystemDir = "system"
	// EtcPrefix is where linemq sees the configuration directory; paths
	// under it in linemq.yaml name the set's files.
	EtcPrefix = "/etc/linemq/"
)

// kind is what a file of the set is, and so how it is checked and where
// it goes.
type kind int

const (
	linemqFile kind = iota // into the configuration directory, same name
	systemFile             // into its system/ folder
)

// known are the files a set may hold, relative to Folder; a name with a
// "*" ("network/*.network") is a pattern for the files of that folder
// with that suffix.
var known = []struct {
	name string
	kind kind
}{
	{"passwd", linemqFile},
	{"acl", linemqFile},
	{"tls/server.crt", linemqFile},
	{"tls/server.key", linemqFile},
	{"tls/ca.crt", linemqFile},
	{"tls/crl.pem", linemqFile},
	{"cluster/mesh.crt", linemqFile},
	{"cluster/mesh.key", linemqFile},
	{"cluster/etcd.crt", linemqFile},
	{"cluster/etcd.key", linemqFile},
	{"cluster/ca.crt", linemqFile},
	{"cluster/crl.pem", linemqFile},
	{"update-keys/*.pub", linemqFile},
	{"network/*.network", systemFile},
	{"hostname", systemFile},
	{"ntp.txt", systemFile},
	{"authorized_keys", systemFile},
}

// File is one file of a set.
type File struct {
	// Name is its name in the set: "linemq.yaml", or a name in Folder
	// such as "tls/server.key".
	Name string
	// Dest is where it goes, relative to the configuration directory.
	Dest string
	// Data is its content.
	Data []byte
}

// Set is the provisioning set found on a boot partition.
type Set struct {
	Boot  string // the boot partition's directory
	Files []File
}

// Read collects the set in boot. A boot partition without one gives an
// empty Set. Other files there (the board's firmware, a README) are not
// the set's and are left alone; a file in Folder that is not a known
// name is a Problem of Check (a misspelt key file must not be skipped).
func Read(boot string) (*Set, []Problem, error) {
	s := &Set{Boot: boot}
	var problems []Problem
	if b, err := os.ReadFile(filepath.Join(boot, ConfigFile)); err == nil {
		s.Files = append(s.Files, File{Name: ConfigFile, Dest: ConfigFile, Data: b})
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	root := filepath.Join(boot, Folder)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path == root {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		k, ok := knownFile(rel)
		if !ok {
			problems = append(problems, Problem{File: Folder + "/" + rel, Msg: "not a file of the provisioning set (docs/appliance.md lists them)"})
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dest := rel
		if k == systemFile {
			dest = SystemDir + "/" + rel
		}
		s.Files = append(s.Files, File{Name: Folder + "/" + rel, Dest: dest, Data: b})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return s, problems, nil
}

// knownFile reports whether rel (in Folder) is a file of the set, and its
// kind.
func knownFile(rel string) (kind, bool) {
	for _, k := range known {
		if dir, suffix, ok := strings.Cut(k.name, "/*"); ok {
			if d, f := filepath.Split(rel); strings.TrimSuffix(d, "/") == dir && strings.HasSuffix(f, suffix) && f != suffix {
				return k.kind, true
			}
			continue
		}
		if k.name == rel {
			return k.kind, true
		}
	}
	return 0, false
}

// Problem is one reason a set is refused.
type Problem struct {
	File string // the set's name for the file ("linemq/acl"), or "" for the set
	Line int    // 1-based, 0 when none
	Msg  string
}

func (p Problem) String() string {
	switch {
	case p.File == "":
		return p.Msg
	case p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
	}
	return p.File + ": " + p.Msg
}

// Error is a refused set: every problem found.
type Error struct{ Problems []Problem }

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return "provisioning set refused:\n  " + strings.Join(lines, "\n  ")
}

// Check validates s against the configuration directory conf it would be
// applied to (its files not in the set stay), staging the result in
// stage, an empty directory: the configuration that would be in force is
// parsed and validated there with its /etc/linemq paths pointing into
// stage. It returns every problem; nil means Apply may go ahead.
func Check(s *Set, conf, stage string) []Problem {
	if err := copyTree(conf, stage); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return []Problem{{Msg: fmt.Sprintf("reading the configuration in force: %v", err)}}
	}
	for _, f := range s.Files {
		if err := writeFile(filepath.Join(stage, f.Dest), f.Data, 0o600); err != nil {
			return []Problem{{Msg: fmt.Sprintf("staging %s: %v", f.Name, err)}}
		}
	}
	var problems []Problem
	nameOf := func(dest string) string {
		for _, f := range s.Files {
			if f.Dest == dest {
				return f.Name
			}
		}
		return EtcPrefix + dest + " (in force)"
	}
	// Messages name files in the stage; say them as the user knows them:
	// the set's name for a file of the set, the path linemq sees for one
	// in force.
	type rename struct {
		path *regexp.Regexp
		name string
	}
	renames := make([]rename, len(s.Files))
	for i, f := range s.Files {
		renames[i] = rename{regexp.MustCompile(regexp.QuoteMeta(filepath.Join(stage, f.Dest)) + `($|[^\w./-])`), f.Name + "$1"}
	}
	plain := func(err error) []Problem {
		var ps []Problem
		for _, e := range unjoin(err) {
			msg := e.Error()
			for _, r := range renames {
				msg = r.path.ReplaceAllString(msg, r.name)
			}
			ps = append(ps, Problem{Msg: strings.ReplaceAll(msg, stage+"/", EtcPrefix)})
		}
		return ps
	}
	at := func(dest string) string { return filepath.Join(stage, dest) }
	has := func(dest string) bool { _, err := os.Stat(at(dest)); return err == nil }

	// The configuration, with the files it names (its validation reads
	// the password and ACL files, the certificates and lists it uses)...
	named := map[string]bool{}
	if b, err := os.ReadFile(at(ConfigFile)); err == nil {
		text := strings.ReplaceAll(string(b), EtcPrefix, stage+"/")
		cfg, err := config.Parse([]byte(text), nameOf(ConfigFile))
		if err == nil {
			named[cfg.Auth.PasswordFile], named[cfg.Auth.ACLFile] = true, true
			err = cfg.Validate()
		}
		problems = append(problems, plain(err)...)
	}
	// ... and the files of the set on their own, where it names them not.
	ac := auth.Config{}
	if has("passwd") && !named[at("passwd")] {
		ac.PasswordFile = at("passwd")
	}
	if has("acl") && !named[at("acl")] {
		ac.ACLFile = at("acl")
	}
	if ac != (auth.Config{}) {
		if _, err := auth.New(ac, auth.Options{}); err != nil {
			problems = append(problems, plain(err)...)
		}
	}
	for _, dir := range []string{"tls", "cluster"} {
		problems = append(problems, checkPKI(stage, dir, nameOf)...)
	}
	for _, f := range s.Files {
		if strings.HasPrefix(f.Dest, "update-keys/") {
			if _, err := update.ParsePublicKey(f.Data); err != nil {
				problems = append(problems, Problem{File: f.Name, Msg: "not an update signing key: " + err.Error()})
			}
		}
	}
	for _, f := range s.Files {
		if !strings.HasPrefix(f.Dest, SystemDir+"/") {
			continue
		}
		for _, p := range checkSystemFile(strings.TrimPrefix(f.Dest, SystemDir+"/"), f.Data) {
			p.File = f.Name
			problems = append(problems, p)
		}
	}
	return problems
}

// checkPKI checks the certificates of dir (tls or cluster) in the stage:
// each key matches its certificate, the CA file parses, the list comes
// from the CA.
func checkPKI(stage, dir string, nameOf func(string) string) []Problem {
	var problems []Problem
	at := func(name string) string { return filepath.Join(stage, dir, name) }
	exists := func(name string) bool { _, err := os.Stat(at(name)); return err == nil }
	pairs := map[string]string{"tls": "server", "cluster": "mesh"}
	names := []string{pairs[dir]}
	if dir == "cluster" {
		names = append(names, "etcd")
	}
	for _, n := range names {
		crt, key := n+".crt", n+".key"
		switch {
		case exists(crt) && exists(key):
			if _, err := tls.LoadX509KeyPair(at(crt), at(key)); err != nil {
				problems = append(problems, Problem{File: nameOf(dir + "/" + key), Msg: strings.TrimPrefix(err.Error(), "tls: ")})
			}
		case exists(crt):
			problems = append(problems, Problem{File: nameOf(dir + "/" + crt), Msg: "its key " + dir + "/" + key + " is missing"})
		case exists(key):
			problems = append(problems, Problem{File: nameOf(dir + "/" + key), Msg: "its certificate " + dir + "/" + crt + " is missing"})
		}
	}
	if exists("ca.crt") {
		list, err := certs.ParseCAs(at("ca.crt"))
		if err != nil {
			problems = append(problems, Problem{File: nameOf(dir + "/ca.crt"), Msg: strings.ReplaceAll(err.Error(), at("ca.crt")+" ", "")})
		} else if exists("crl.pem") {
			if _, err := certs.LoadCRL(at("crl.pem"), list); err != nil {
				problems = append(problems, Problem{File: nameOf(dir + "/crl.pem"), Msg: strings.ReplaceAll(err.Error(), at("crl.pem"), "the file")})
			}
		}
	} else if exists("crl.pem") {
		problems = append(problems, Problem{File: nameOf(dir + "/crl.pem"), Msg: "needs " + dir + "/ca.crt, the authority that signs it"})
	}
	return problems
}

// unjoin returns the errors joined in err, or err alone; nil for nil.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
