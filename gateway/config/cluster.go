package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/linemq/linemq/gateway/certs"
)

// ClusterTLS is the mutual TLS of the node-to-node transport
// (cluster.tls). Every gateway presents its certificate both when it dials
// and when it accepts, and verifies the other's against CAFile: a gateway
// without a certificate from that CA is refused. See docs/cluster.md.
type ClusterTLS struct {
	// CertFile and KeyFile are this gateway's PEM certificate (chain) and
	// key. The certificate names the node: a DNS name equal to node_id
	// (unless ServerName is set), valid for server and client
	// authentication.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`

	// CAFile holds the PEM certificates of the authorities that issue the
	// gateways' certificates.
	CAFile string `yaml:"ca_file"`

	// CRLFile, optional, holds the authorities' PEM revocation lists: a
	// gateway whose certificate is listed is refused at its next
	// connection. All four files are read again when they change and on
	// SIGHUP; streams already open stay.
	CRLFile string `yaml:"crl_file"`

	// ServerName, when every gateway's certificate carries one shared name
	// instead of its node's, is that name. Any certificate from the CA may
	// then speak for any node. Default: each certificate names its node,
	// and a dialler checks the node it dials, not its address.
	ServerName string `yaml:"server_name"`
}

// EtcdTLS is how the etcd client reaches https:// endpoints
// (cluster.etcd.tls). With embed: true it is the embedded member's mutual
// TLS instead: the certificate (naming the member's IP addresses, for
// server and client authentication) serves its peers and clients and
// this gateway's own client, and the CA verifies the other members and
// every client, which must present a certificate.
type EtcdTLS struct {
	// CAFile holds the PEM certificates of the authorities that issued
	// etcd's server certificates. Default: the system's.
	CAFile string `yaml:"ca_file"`

	// CertFile and KeyFile are the client certificate and key this
	// gateway presents, for an etcd run with --client-cert-auth.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`

	// CRLFile, with embed: true only, holds the CA's PEM revocation
	// lists: a member or client whose certificate is listed is refused.
	CRLFile string `yaml:"crl_file"`
}

// Files returns the section's files, for the embedded member (embed: true),
// which reads them itself (etcd's TLSInfo).
func (t *EtcdTLS) Files() certs.Files {
	return certs.Files{Cert: t.CertFile, Key: t.KeyFile, CA: t.CAFile, CRL: t.CRLFile}
}

// Set reports whether any key of the section is.
func (t *ClusterTLS) Set() bool { return *t != ClusterTLS{} }

// Set reports whether any key of the section is.
func (t *EtcdTLS) Set() bool { return *t != EtcdTLS{} }

// Files returns the section's files, for certs.LoadMutual.
func (t *ClusterTLS) Files() certs.Files {
	return certs.Files{Cert: t.CertFile, Key: t.KeyFile, CA: t.CAFile, CRL: t.CRLFile}
}

// Load reads the files into the etcd client's TLS configuration, or
// returns nil when the section is not set.
func (t *EtcdTLS) Load() (*tls.Config, error) {
	if !t.Set() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		cas, err := certs.ParseCAs(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cluster.etcd.tls.ca_file: %w", err)
		}
		c.RootCAs = certs.Pool(cas)
	}
	if t.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cluster.etcd.tls: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// clusterTLS checks cluster.tls and cluster.etcd.tls: the files load, the
// mesh's certificate names this node and may serve as client and server,
// and etcd's TLS goes with https endpoints.
func (v *validator) clusterTLS(c *Cluster, nodeID string) {
	if t := &c.TLS; t.Set() {
		const k = "cluster.tls."
		var pair *tls.Certificate
		switch {
		case t.CertFile == "":
			v.fail(k+"cert_file", errors.New("required: the mesh's TLS is mutual, every gateway presents a certificate"))
		case t.KeyFile == "":
			v.fail(k+"key_file", errors.New("required with cert_file"))
		default:
			if p, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
				v.fail(pairKey(k, t.KeyFile, err), errors.New(strings.TrimPrefix(err.Error(), "tls: ")))
			} else {
				pair = &p
			}
		}
		if t.CAFile == "" {
			v.fail(k+"ca_file", errors.New("required: the authority whose certificates the other gateways present"))
		} else if cas, err := certs.ParseCAs(t.CAFile); err != nil {
			v.fail(k+"ca_file", err)
		} else if t.CRLFile != "" {
			if _, err := certs.LoadCRL(t.CRLFile, cas); err != nil {
				v.fail(k+"crl_file", err)
			}
		}
		if pair != nil {
			v.meshCert(k, pair, t.ServerName, nodeID)
		}
	}
	if t := &c.Etcd.TLS; t.Set() {
		const k = "cluster.etcd.tls."
		if c.Etcd.Embed {
			if t.CertFile == "" && t.KeyFile == "" {
				v.fail(k+"cert_file", errors.New("required with embed: true: the members' TLS is mutual, each presents a certificate"))
			}
			if t.CAFile == "" {
				v.fail(k+"ca_file", errors.New("required with embed: true: the authority of the members' and clients' certificates"))
			}
			for _, u := range []struct{ key, list string }{
				{"cluster.etcd.peer_listen", c.Etcd.PeerListen}, {"cluster.etcd.client_listen", c.Etcd.ClientListen}, {"cluster.etcd.initial_cluster", c.Etcd.InitialCluster},
			} {
				if strings.Contains(u.list, "http://") {
					v.fail(u.key, fmt.Errorf("%q has plain http:// URLs while cluster.etcd.tls is set: write https://", u.list))
				}
			}
		} else if t.CRLFile != "" {
			v.fail(k+"crl_file", errors.New("only with embed: true (an external etcd checks its own lists)"))
		}
		for i, ep := range c.Etcd.Endpoints {
			if strings.HasPrefix(ep, "http://") {
				v.fail(fmt.Sprintf("cluster.etcd.endpoints[%d]", i), fmt.Errorf("%q is plain HTTP while cluster.etcd.tls is set: write https://", ep))
			}
		}
		switch {
		case t.CertFile != "" && t.KeyFile == "":
			v.fail(k+"key_file", errors.New("required with cert_file"))
		case t.KeyFile != "" && t.CertFile == "":
			v.fail(k+"cert_file", errors.New("required with key_file"))
		case t.CertFile != "":
			if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
				v.fail(pairKey(k, t.KeyFile, err), errors.New(strings.TrimPrefix(err.Error(), "tls: ")))
			}
		}
		if t.CAFile != "" {
			if cas, err := certs.ParseCAs(t.CAFile); err != nil {
				v.fail(k+"ca_file", err)
			} else if t.CRLFile != "" && c.Etcd.Embed {
				if _, err := certs.LoadCRL(t.CRLFile, cas); err != nil {
					v.fail(k+"crl_file", err)
				}
			}
		}
	} else if c.Etcd.Embed {
		for _, u := range []struct{ key, list string }{
			{"cluster.etcd.peer_listen", c.Etcd.PeerListen}, {"cluster.etcd.client_listen", c.Etcd.ClientListen}, {"cluster.etcd.initial_cluster", c.Etcd.InitialCluster},
		} {
			if strings.Contains(u.list, "https://") {
				v.fail(u.key, fmt.Errorf("%q has https:// URLs: set cluster.etcd.tls for the member's certificate", u.list))
			}
		}
	}
}

// meshCert checks that the mesh certificate can do its job: other gateways
// check that it names this node (or the shared server name), and it serves
// both to accept and to dial.
func (v *validator) meshCert(k string, pair *tls.Certificate, serverName, nodeID string) {
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		v.fail(k+"cert_file", err)
		return
	}
	name, how := serverName, "cluster.tls.server_name"
	if name == "" {
		name, how = nodeID, "node_id"
	}
	if err := cert.VerifyHostname(name); err != nil {
		hint := "; or set cluster.tls.server_name to the name every gateway's certificate carries"
		if serverName != "" {
			hint = ""
		}
		v.fail(k+"cert_file", fmt.Errorf("the certificate does not name %s %q, which the other gateways check (DNS names: %s)%s",
			how, name, strings.Join(cert.DNSNames, ", "), hint))
	}
	if eku := cert.ExtKeyUsage; len(eku) > 0 && !slices.Contains(eku, x509.ExtKeyUsageAny) {
		for _, u := range []struct {
			usage x509.ExtKeyUsage
			what  string
		}{{x509.ExtKeyUsageServerAuth, "server"}, {x509.ExtKeyUsageClientAuth, "client"}} {
			if !slices.Contains(eku, u.usage) {
				v.fail(k+"cert_file", fmt.Errorf("the certificate is not valid for %s authentication, which the mesh needs (each gateway both accepts and dials)", u.what))
			}
		}
	}
}

// pairKey says which of cert_file and key_file an error from
// tls.LoadX509KeyPair is about.
func pairKey(prefix, keyFile string, err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == keyFile || strings.Contains(err.Error(), "private key") {
		return prefix + "key_file"
	}
	return prefix + "cert_file"
}
