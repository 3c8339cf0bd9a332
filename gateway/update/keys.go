package update

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Key is a trusted public key.
type Key struct {
	Public ed25519.PublicKey
	// Name is where it came from: the file's name in the keys directory.
	Name string
}

// ID is a short fingerprint of the key (the first 8 bytes of the SHA-256
// of the public key, in hex), for logs and the page.
func (k Key) ID() string {
	sum := sha256.Sum256(k.Public)
	return hex.EncodeToString(sum[:8])
}

// GenerateKey makes a signing key pair as PEM: the private key (PKCS #8)
// and the public key (PKIX).
func GenerateKey() (private, public []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	pb, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pb}), nil
}

// ParsePrivateKey reads an ed25519 private key from PKCS #8 PEM.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM \"PRIVATE KEY\" block (linemq update keygen writes one)")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an ed25519 key", k)
	}
	return ek, nil
}

// ParsePublicKey reads an ed25519 public key from PKIX PEM.
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("not a PEM \"PUBLIC KEY\" block")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an ed25519 key", k)
	}
	return ek, nil
}

// LoadKeys reads every *.pub file of dir as a trusted key. A file that is
// not an ed25519 public key is an error naming it: a key meant to be
// trusted and silently skipped would refuse every bundle it signed. A
// directory without keys is an error too: nothing could be verified.
func LoadKeys(dir string) ([]Key, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.pub"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var keys []Key
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		k, err := ParsePublicKey(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		keys = append(keys, Key{Public: k, Name: strings.TrimSuffix(filepath.Base(n), ".pub")})
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no trusted update keys (*.pub) in %s", dir)
	}
	return keys, nil
}
