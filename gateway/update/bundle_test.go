package update

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func testKey(t testing.TB, name string) (ed25519.PrivateKey, Key) {
	t.Helper()
	priv, pub, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k, Key{Public: p, Name: name}
}

var binary = bytes.Repeat([]byte("\x7fELF linemq "), 5000)

func bundle(t testing.TB, key ed25519.PrivateKey, arch string, files ...Source) []byte {
	t.Helper()
	if files == nil {
		files = []Source{{Name: "linemq", Mode: 0o755, Data: binary}}
	}
	var b bytes.Buffer
	if err := Write(&b, key, "v1.5.0", arch, time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), files); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// rewrite builds a bundle entry by entry, to make the malformed ones a
// signer's tool never would.
type entry struct {
	name string
	data []byte
}

func rewrite(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.data)
	}
	tw.Close()
	zw.Close()
	return b.Bytes()
}

// entries reads a bundle's entries back.
func entries(t testing.TB, b []byte) []entry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		d, _ := io.ReadAll(tr)
		out = append(out, entry{h.Name, d})
	}
}

func TestReadGoodBundle(t *testing.T) {
	key, trusted := testKey(t, "plant")
	_, other := testKey(t, "other")
	b := bundle(t, key, "arm64")
	var got bytes.Buffer
	v, err := Read(bytes.NewReader(b), []Key{other, trusted}, "arm64", func(f File) (io.Writer, error) {
		if f.Name != "linemq" || f.Mode != 0o755 {
			t.Errorf("file %+v", f)
		}
		return &got, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v.Manifest.Version != "v1.5.0" || v.Manifest.Arch != "arm64" || v.Key.Name != "plant" {
		t.Errorf("verified %+v", v)
	}
	if !bytes.Equal(got.Bytes(), binary) {
		t.Error("the file's bytes differ from what was bundled")
	}
}

// TestReadRefuses: every bundle that is not exactly what a trusted key
// signed, for this architecture, is refused with a reason naming what is
// wrong, and nothing of a wrongly signed one reaches the destination.
func TestReadRefuses(t *testing.T) {
	key, trusted := testKey(t, "plant")
	otherKey, _ := testKey(t, "other")
	good := bundle(t, key, "arm64")
	es := entries(t, good)
	manifest, sig, file := es[0].data, es[1].data, es[2].data
	tampered := bytes.Clone(file)
	tampered[100] ^= 1
	var m Manifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	signedManifest := func(edit func(*Manifest)) []byte {
		m2 := m
		m2.Files = append([]File(nil), m.Files...)
		edit(&m2)
		b, _ := json.Marshal(m2)
		return b
	}
	gz := func(b []byte) []byte { // a valid gzip stream of b
		var out bytes.Buffer
		zw := gzip.NewWriter(&out)
		zw.Write(b)
		zw.Close()
		return out.Bytes()
	}
	// A bundle cut short: the gzip stream itself ends early.
	raw, _ := io.ReadAll(must(gzip.NewReader(bytes.NewReader(good))))

	tests := []struct {
		name   string
		bundle []byte
		arch   string
		want   string
	}{
		{"wrong key", bundle(t, otherKey, "arm64"), "arm64", "signed by none of the 1 trusted keys"},
		{"unsigned", rewrite(t, entry{ManifestName, manifest}, entry{"linemq", file}), "arm64", `unsigned: "linemq" follows the manifest`},
		{"only a manifest", rewrite(t, entry{ManifestName, manifest}), "arm64", "unsigned: it ends after the manifest"},
		{"signature of another manifest", rewrite(t, entry{ManifestName, signedManifest(func(m *Manifest) { m.Version = "v9" })}, entry{SignatureName, sig}, entry{"linemq", file}), "arm64", "signed by none"},
		{"short signature", rewrite(t, entry{ManifestName, manifest}, entry{SignatureName, sig[:10]}), "arm64", "not an ed25519 signature"},
		{"wrong architecture", good, "armv7", "it is for arm64; this gateway runs armv7"},
		{"altered file", rewrite(t, entry{ManifestName, manifest}, entry{SignatureName, sig}, entry{"linemq", tampered}), "arm64", "linemq: its SHA-256 is"},
		{"shorter file", rewrite(t, entry{ManifestName, manifest}, entry{SignatureName, sig}, entry{"linemq", file[:len(file)-1]}), "arm64", "linemq is 59999 bytes; the manifest says 60000"},
		{"file missing", rewrite(t, entry{ManifestName, manifest}, entry{SignatureName, sig}), "arm64", "reading linemq: it ends early"},
		{"another file", rewrite(t, entry{ManifestName, manifest}, entry{SignatureName, sig}, entry{"evil", file}), "arm64", `entry "evil" where the manifest lists "linemq"`},
		{"extra entry", rewrite(t, entry{ManifestName, manifest}, entry{SignatureName, sig}, entry{"linemq", file}, entry{"extra", []byte("x")}), "arm64", `entry "extra" after the files`},
		{"manifest not first", rewrite(t, entry{"linemq", file}), "arm64", `entry "linemq" where manifest.json must be`},
		{"not gzip", []byte("plain text"), "arm64", "not a gzip-compressed bundle"},
		{"empty", nil, "arm64", "not a gzip-compressed bundle"},
		{"truncated archive", gz(raw[:len(raw)/2]), "arm64", "ends early"},
		{"truncated compression", good[:len(good)/2], "arm64", "ends early"},
		{"truncated in the signature", gz(raw[:1024+512+512+20]), "arm64", "ends early"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wrote := 0
			_, err := Read(bytes.NewReader(tt.bundle), []Key{trusted}, tt.arch, func(File) (io.Writer, error) {
				wrote++
				return io.Discard, nil
			})
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err %v, want a refusal", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %q, want it to say %q", err, tt.want)
			}
			if strings.Contains(tt.want, "signed by none") || strings.Contains(tt.want, "unsigned") {
				if wrote != 0 {
					t.Error("a file of a bundle signed by no trusted key reached its destination")
				}
			}
		})
	}
}

// TestManifestNames: a manifest, even a signed one, may name only plain
// files: nothing can be written outside the slot.
func TestManifestNames(t *testing.T) {
	key, trusted := testKey(t, "plant")
	for _, name := range []string{"../linemq", "/usr/bin/linemq", "a/b", "..", ".", "", ManifestName, SignatureName, "a\x00b"} {
		m := Manifest{Format: Format, Version: "v1", Arch: "arm64", Files: []File{{Name: name, Size: 1, Mode: 0o755, SHA256: strings.Repeat("0", 64)}}}
		mb, _ := json.Marshal(m)
		// The manifest is refused before any entry after it is read (tar
		// cannot even hold a name with a NUL).
		b := rewrite(t, entry{ManifestName, mb}, entry{SignatureName, ed25519.Sign(key, mb)})
		_, err := Read(bytes.NewReader(b), []Key{trusted}, "", nil)
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), "file name") {
			t.Errorf("name %q: %v", name, err)
		}
		var buf bytes.Buffer
		if err := Write(&buf, key, "v1", "arm64", time.Now(), []Source{{Name: name, Mode: 0o755, Data: []byte("x")}}); err == nil {
			t.Errorf("Write bundled a file named %q", name)
		}
	}
}

func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadKeys(dir); err == nil || !strings.Contains(err.Error(), "no trusted update keys") {
		t.Errorf("empty directory: %v", err)
	}
	_, pub, _ := GenerateKey()
	writeFile(t, dir+"/plant.pub", pub)
	keys, err := LoadKeys(dir)
	if err != nil || len(keys) != 1 || keys[0].Name != "plant" || len(keys[0].ID()) != 16 {
		t.Fatalf("keys %+v, %v", keys, err)
	}
	priv, _, _ := GenerateKey()
	writeFile(t, dir+"/oops.pub", priv)
	if _, err := LoadKeys(dir); err == nil || !strings.Contains(err.Error(), "oops.pub") {
		t.Errorf("a private key among the public ones: %v", err)
	}
}

func TestArchName(t *testing.T) {
	for _, tt := range []struct{ goarch, goarm, want string }{
		{"arm64", "", "arm64"}, {"arm", "7", "armv7"}, {"arm", "6", "armv6"}, {"arm", "", "armv7"}, {"arm", "7,softfloat", "armv7"}, {"amd64", "", "amd64"},
	} {
		if got := archName(tt.goarch, tt.goarm); got != tt.want {
			t.Errorf("archName(%q, %q) = %q, want %q", tt.goarch, tt.goarm, got, tt.want)
		}
	}
	if Arch() == "" {
		t.Error("Arch() is empty")
	}
}

// FuzzRead: no input makes Read panic, and an input it accepts was
// signed by the trusted key.
func FuzzRead(f *testing.F) {
	key, trusted := testKey(f, "plant")
	good := bundle(f, key, "arm64", Source{Name: "linemq", Mode: 0o755, Data: []byte("small")})
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{})
	f.Add(rewrite(f, entry{ManifestName, []byte("{}")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Read(bytes.NewReader(b), []Key{trusted}, "", func(File) (io.Writer, error) { return io.Discard, nil })
		if err == nil && v.Key.Name != "plant" {
			t.Fatalf("accepted without the trusted key: %+v", v)
		}
	})
}

func writeFile(t testing.TB, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
