package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Files names the files of one TLS identity. CRL is optional.
type Files struct {
	Cert, Key, CA, CRL string
}

// List returns the names that are set, for a Watcher.
func (f Files) List() []string { return []string{f.Cert, f.Key, f.CA, f.CRL} }

// material is one loading of a Files.
type material struct {
	pair tls.Certificate
	pool *x509.CertPool
	crl  *CRL
	now  func() time.Time // VerifyTime, floored at the certificate's NotBefore
}

// Mutual is a mutual-TLS identity read from files: this end's certificate
// and key, the authorities both ends' certificates come from, and
// optionally their revocation list. Reload replaces all of it at once;
// handshakes after that use the new material (ServerConfig's at once,
// ClientConfig's from the next call), connections made before keep
// theirs. Safe for concurrent use.
type Mutual struct {
	files Files
	cur   atomic.Pointer[material]
}

// LoadMutual reads files. Errors say which file failed.
func LoadMutual(files Files) (*Mutual, error) {
	m := &Mutual{files: files}
	if err := m.Reload(); err != nil {
		return nil, err
	}
	return m, nil
}

// Files returns the files the identity is read from.
func (m *Mutual) Files() Files { return m.files }

// Reload reads the files again. On an error the material in force stays.
func (m *Mutual) Reload() error {
	f := m.files
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return fmt.Errorf("cert_file %s, key_file %s: %w", f.Cert, f.Key, err)
	}
	cas, err := ParseCAs(f.CA)
	if err != nil {
		return fmt.Errorf("ca_file: %w", err)
	}
	mat := &material{pair: pair, pool: Pool(cas), now: VerifyTime(pair.Leaf.NotBefore)}
	if f.CRL != "" {
		if mat.crl, err = LoadCRL(f.CRL, cas); err != nil {
			return fmt.Errorf("crl_file: %w", err)
		}
	}
	m.cur.Store(mat)
	return nil
}

// ServerConfig is the configuration of the accepting end: it presents the
// certificate in force and requires a client certificate that the
// authorities in force verify for client authentication and the list in
// force does not revoke.
func (m *Mutual) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &m.cur.Load().pair, nil
		},
		// Verified below, against the authorities in force at the
		// handshake rather than those of a pool fixed in the config.
		ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return m.cur.Load().verify(cs)
		},
	}
}

// ClientConfig is a configuration for one dial, made from the material in
// force: it presents the certificate and verifies the server's against
// the authorities (for the ServerName the dialler sets, a DNS name or an
// IP address) and the list. Ask for a new one at every dial.
func (m *Mutual) ClientConfig() *tls.Config {
	mat := m.cur.Load()
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{mat.pair},
		RootCAs:      mat.pool,
		Time:         mat.now,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if r := mat.crl.RevokedChains(cs.VerifiedChains); r != nil {
				return RevokedError(r)
			}
			return nil
		},
	}
}

// verify checks the client's certificate chain as crypto/tls would, then
// against the revocation list.
func (mat *material) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("certs: no certificate presented")
	}
	opts := x509.VerifyOptions{
		Roots:         mat.pool,
		CurrentTime:   mat.now(),
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	chains, err := cs.PeerCertificates[0].Verify(opts)
	if err != nil {
		return err
	}
	if r := mat.crl.RevokedChains(chains); r != nil {
		return RevokedError(r)
	}
	return nil
}
