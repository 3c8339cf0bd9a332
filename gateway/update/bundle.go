package update

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// Format is the bundle format this package writes and reads.
const Format = 1

// The archive's entries before the files.
const (
	ManifestName  = "manifest.json"
	SignatureName = "manifest.sig"
)

// Limits a reader holds a bundle to, so that a hostile upload cannot make
// it read or write without end.
const (
	maxManifest = 64 << 10
	maxFiles    = 16
	// MaxFileSize is the largest file a bundle may carry: linemq is
	// about 40 MB.
	MaxFileSize = 256 << 20
)

// Manifest describes a bundle; it is what the signature covers.
type Manifest struct {
	Format  int       `json:"format"`
	Version string    `json:"version"` // linemq's version, as `linemq -version` prints it
	Arch    string    `json:"arch"`    // "arm64", "armv7", "armv6", "amd64", ...
	Created time.Time `json:"created"`
	Files   []File    `json:"files"`
}

// File is one file of a bundle.
type File struct {
	Name   string `json:"name"` // a plain name: no directories
	Size   int64  `json:"size"`
	Mode   int64  `json:"mode"`   // permission bits
	SHA256 string `json:"sha256"` // hex
}

// Source is a file to put into a bundle.
type Source struct {
	Name string
	Mode int64
	Data []byte
}

// Write writes a bundle of files for version and arch to w, signed with
// key.
func Write(w io.Writer, key ed25519.PrivateKey, version, arch string, created time.Time, files []Source) error {
	m := Manifest{Format: Format, Version: version, Arch: arch, Created: created.UTC()}
	for _, f := range files {
		sum := sha256.Sum256(f.Data)
		m.Files = append(m.Files, File{Name: f.Name, Size: int64(len(f.Data)), Mode: f.Mode, SHA256: hex.EncodeToString(sum[:])})
	}
	if err := m.check(); err != nil {
		return err
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	mb = append(mb, '\n')
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	put := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: m.Created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := put(ManifestName, 0o644, mb); err != nil {
		return err
	}
	if err := put(SignatureName, 0o644, ed25519.Sign(key, mb)); err != nil {
		return err
	}
	for _, f := range files {
		if err := put(f.Name, f.Mode, f.Data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// check is what every manifest must hold, written or read.
func (m *Manifest) check() error {
	switch {
	case m.Format != Format:
		return fmt.Errorf("bundle format %d (this linemq reads format %d)", m.Format, Format)
	case m.Version == "":
		return errors.New("the manifest names no version")
	case m.Arch == "":
		return errors.New("the manifest names no architecture")
	case len(m.Files) == 0:
		return errors.New("the manifest lists no file")
	case len(m.Files) > maxFiles:
		return fmt.Errorf("the manifest lists %d files (at most %d)", len(m.Files), maxFiles)
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		switch {
		case f.Name == "" || f.Name != path.Base(f.Name) || f.Name == "." || f.Name == ".." || strings.ContainsAny(f.Name, "/\\\x00"):
			return fmt.Errorf("file name %q: a plain name without directories", f.Name)
		case f.Name == ManifestName || f.Name == SignatureName:
			return fmt.Errorf("file name %q is the bundle's own", f.Name)
		case seen[f.Name]:
			return fmt.Errorf("file %q listed twice", f.Name)
		case f.Size < 0 || f.Size > MaxFileSize:
			return fmt.Errorf("file %q: size %d out of range (at most %d)", f.Name, f.Size, MaxFileSize)
		case f.Mode&^0o777 != 0:
			return fmt.Errorf("file %q: mode %o has more than permission bits", f.Name, f.Mode)
		case len(f.SHA256) != 64 || strings.Trim(f.SHA256, "0123456789abcdef") != "":
			return fmt.Errorf("file %q: sha256 %q is not 64 lower-case hex digits", f.Name, f.SHA256)
		}
		seen[f.Name] = true
	}
	return nil
}

// Error is a refused bundle: what is wrong with it, for the operator.
type Error struct{ Reason string }

func (e *Error) Error() string { return "bundle refused: " + e.Reason }

func refuse(format string, args ...any) error { return &Error{Reason: fmt.Sprintf(format, args...)} }

// Verified is a bundle whose signature and files have been checked.
type Verified struct {
	Manifest Manifest
	// Key is the trusted key that signed it.
	Key Key
}

// Read reads a bundle from r and checks it against the trusted keys and
// this gateway's architecture arch ("" skips the architecture check). It
// calls create for each file, after the signature has been checked, and
// copies the file's bytes to what create returns; a file whose size or
// hash differs from the manifest makes Read fail, and the caller must
// then discard everything create was asked for. create may be nil to
// check only. Every refusal of the bundle itself is an *Error.
func Read(r io.Reader, keys []Key, arch string, create func(f File) (io.Writer, error)) (*Verified, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, refuse("not a gzip-compressed bundle: %v", err)
	}
	tr := tar.NewReader(zr)
	entry := func(want string, limit int64) ([]byte, error) {
		h, err := tr.Next()
		if err == io.EOF && want == SignatureName {
			return nil, refuse("unsigned: it ends after the manifest, with no %s", SignatureName)
		}
		if err != nil {
			return nil, refuse("reading %s: %v", want, truncated(err))
		}
		if h.Name != want && want == SignatureName {
			return nil, refuse("unsigned: %q follows the manifest where %s must be", h.Name, SignatureName)
		}
		if h.Name != want || h.Typeflag != tar.TypeReg {
			return nil, refuse("entry %q where %s must be", h.Name, want)
		}
		if h.Size > limit {
			return nil, refuse("%s is %d bytes (at most %d)", want, h.Size, limit)
		}
		b, err := io.ReadAll(io.LimitReader(tr, limit))
		if err != nil {
			return nil, refuse("reading %s: %v", want, truncated(err))
		}
		return b, nil
	}
	mb, err := entry(ManifestName, maxManifest)
	if err != nil {
		return nil, err
	}
	sig, err := entry(SignatureName, ed25519.SignatureSize)
	if err != nil {
		return nil, err
	}
	if len(sig) != ed25519.SignatureSize {
		return nil, refuse("%s is %d bytes, not an ed25519 signature (%d)", SignatureName, len(sig), ed25519.SignatureSize)
	}
	var signer *Key
	for i := range keys {
		if ed25519.Verify(keys[i].Public, mb, sig) {
			signer = &keys[i]
			break
		}
	}
	if signer == nil {
		return nil, refuse("signed by none of the %d trusted keys", len(keys))
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(mb))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, refuse("%s: %v", ManifestName, err)
	}
	if err := m.check(); err != nil {
		return nil, refuse("%s: %v", ManifestName, err)
	}
	if arch != "" && m.Arch != arch {
		return nil, refuse("it is for %s; this gateway runs %s", m.Arch, arch)
	}
	for _, f := range m.Files {
		h, err := tr.Next()
		if err != nil {
			return nil, refuse("reading %s: %v", f.Name, truncated(err))
		}
		if h.Name != f.Name || h.Typeflag != tar.TypeReg {
			return nil, refuse("entry %q where the manifest lists %q", h.Name, f.Name)
		}
		if h.Size != f.Size {
			return nil, refuse("%s is %d bytes; the manifest says %d", f.Name, h.Size, f.Size)
		}
		dst := &trackWriter{w: io.Discard}
		if create != nil {
			if dst.w, err = create(f); err != nil {
				return nil, err
			}
		}
		sum := sha256.New()
		n, err := io.Copy(io.MultiWriter(dst, sum), tr)
		switch {
		case dst.err != nil:
			// The destination's (a full disk): not the bundle's fault.
			return nil, fmt.Errorf("writing %s: %w", f.Name, dst.err)
		case err != nil:
			return nil, refuse("reading %s: %v", f.Name, truncated(err))
		}
		if n != f.Size {
			return nil, refuse("%s: %d of %d bytes", f.Name, n, f.Size)
		}
		if got := hex.EncodeToString(sum.Sum(nil)); got != f.SHA256 {
			return nil, refuse("%s: its SHA-256 is %s; the manifest says %s", f.Name, got, f.SHA256)
		}
	}
	if h, err := tr.Next(); err == nil {
		return nil, refuse("entry %q after the files the manifest lists", h.Name)
	} else if err != io.EOF {
		return nil, refuse("after the files: %v", truncated(err))
	}
	return &Verified{Manifest: m, Key: *signer}, nil
}

// trackWriter remembers its writer's error, to tell a failed write (the
// caller's disk) from a failed read (the bundle).
type trackWriter struct {
	w   io.Writer
	err error
}

func (t *trackWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if err != nil {
		t.err = err
	}
	return n, err
}

// truncated names the usual cause of an unexpected end.
func truncated(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errors.New("it ends early (truncated?)")
	}
	return err
}
