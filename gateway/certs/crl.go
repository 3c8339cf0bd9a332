package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"
)

// CRL is a set of certificate revocation lists.
type CRL struct {
	lists []*x509.RevocationList
	// revoked maps an issuer (its raw subject) to the serial numbers it
	// revoked, as decimal strings.
	revoked map[string]map[string]bool
}

// LoadCRL reads the PEM (or DER) revocation lists in file and checks each
// against the authorities in cas: a list signed by none of them is
// refused. Errors name the file.
func LoadCRL(file string, cas []*x509.Certificate) (*CRL, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var ders [][]byte
	if bytes.Contains(b, []byte("-----BEGIN")) {
		for rest := b; ; {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			if blk.Type == "X509 CRL" {
				ders = append(ders, blk.Bytes)
			}
		}
	} else {
		ders = [][]byte{b}
	}
	noList := fmt.Errorf("%s holds no revocation list (PEM \"X509 CRL\" blocks, or one list in DER)", file)
	if len(ders) == 0 {
		return nil, noList
	}
	c := &CRL{revoked: map[string]map[string]bool{}}
	for i, der := range ders {
		l, err := x509.ParseRevocationList(der)
		switch {
		case err != nil && len(ders) == 1 && !bytes.Contains(b, []byte("-----BEGIN")):
			return nil, noList
		case err != nil:
			return nil, fmt.Errorf("%s, list %d: %w", file, i+1, err)
		}
		if !signedByOneOf(l, cas) {
			return nil, fmt.Errorf("%s, list %d (issuer %s): not signed by any authority of the CA file", file, i+1, l.Issuer)
		}
		c.lists = append(c.lists, l)
		set := c.revoked[string(l.RawIssuer)]
		if set == nil {
			set = map[string]bool{}
			c.revoked[string(l.RawIssuer)] = set
		}
		for _, e := range l.RevokedCertificateEntries {
			set[e.SerialNumber.String()] = true
		}
	}
	return c, nil
}

func signedByOneOf(l *x509.RevocationList, cas []*x509.Certificate) bool {
	for _, ca := range cas {
		if bytes.Equal(ca.RawSubject, l.RawIssuer) && l.CheckSignatureFrom(ca) == nil {
			return true
		}
	}
	return false
}

// Revoked returns the first certificate of chain (leaf first, as in
// tls.ConnectionState.VerifiedChains) that its issuer's list revokes, or
// nil. The chain's last certificate, the root, is trusted as it is.
func (c *CRL) Revoked(chain []*x509.Certificate) *x509.Certificate {
	if c == nil {
		return nil
	}
	for i := 0; i+1 < len(chain); i++ {
		if c.revoked[string(chain[i].RawIssuer)][chain[i].SerialNumber.String()] {
			return chain[i]
		}
	}
	return nil
}

// RevokedChains applies Revoked to every verified chain: a connection is
// revoked when each of its chains is (a certificate can verify through
// more than one path).
func (c *CRL) RevokedChains(chains [][]*x509.Certificate) *x509.Certificate {
	var first *x509.Certificate
	for _, ch := range chains {
		r := c.Revoked(ch)
		if r == nil {
			return nil
		}
		if first == nil {
			first = r
		}
	}
	return first
}

// Stale returns the issuers of lists whose next update has passed at now,
// or nil.
func (c *CRL) Stale(now time.Time) []string {
	if c == nil {
		return nil
	}
	var s []string
	for _, l := range c.lists {
		if !l.NextUpdate.IsZero() && now.After(l.NextUpdate) {
			s = append(s, l.Issuer.String())
		}
	}
	return s
}

// ErrRevoked is what a handshake fails with when the client's certificate
// is revoked.
var ErrRevoked = errors.New("certificate revoked")

// RevokedError names the revoked certificate.
func RevokedError(cert *x509.Certificate) error {
	return fmt.Errorf("%w: serial %s of %s", ErrRevoked, cert.SerialNumber, cert.Subject)
}

// ParseCAs reads the PEM certificates of file, for LoadCRL and for a pool.
func ParseCAs(file string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var cas []*x509.Certificate
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		cas = append(cas, c)
	}
	if len(cas) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return cas, nil
}

// Pool makes a pool of cas.
func Pool(cas []*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range cas {
		p.AddCert(c)
	}
	return p
}
