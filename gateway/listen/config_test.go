package listen

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestConfigsValidate(t *testing.T) {
	p := newPKI(t)
	cs := Configs{
		{},                                      // tcp :1883
		{Type: TLS, CertFile: p.certFile},       // no key
		{Type: "quic"},                          // unknown
		{Type: WS, Path: "mqtt", CertFile: "x"}, // path without /, cert on ws
		{Type: TCP, Address: ":1883"},           // same as [0]
		{Type: TLS, Address: ":2005", CertFile: p.certFile, KeyFile: p.keyFile, RequireClientCert: true},
		{Type: TCP, Address: "localhost"},
		{Type: WSS, CertFile: p.certFile, KeyFile: p.ca.file}, // a certificate given as the key
		{Type: TCP, Address: ":2008", Path: "/x", Origins: []string{"a"}},
		{Type: WS, Address: ":2009", Origins: []string{"[x"}},
		{Type: TLS, Address: ":2010", CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.certFile + ".missing"},
		{Type: TLS, Address: ":2011", CertFile: p.certFile, KeyFile: p.keyFile, CRLFile: p.ca.file},
		{Type: TCP, Address: ":2012", CRLFile: p.ca.file},
		{Type: TLS, Address: ":2013", CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.ca.file, CRLFile: p.ca.file},
		{Type: TLS, Address: ":2014", CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.ca.file, CRLFile: p.otherCRL},
	}
	err := cs.Validate()
	want := []string{
		"listeners[1].key_file: required for a tls listener",
		`listeners[2].type: unknown type "quic" (valid: tcp, tls, ws, wss)`,
		`listeners[3].path: "mqtt" must start with /`,
		"listeners[3].cert_file: only for tls and wss listeners (this one is ws)",
		"listeners[4].address: :1883 is also listeners[0].address",
		"listeners[5].require_client_cert: needs ca_file",
		`listeners[6].address: invalid address "localhost"`,
		"listeners[7].key_file: ",
		"listeners[8].path: only for ws and wss listeners",
		"listeners[8].origins: only for ws and wss listeners",
		`listeners[9].origins[0]: bad host pattern "[x"`,
		"listeners[10].ca_file: open " + p.certFile + ".missing: no such file or directory",
		"listeners[11].crl_file: needs ca_file",
		"listeners[12].crl_file: only for tls and wss listeners (this one is tcp)",
		"listeners[13].crl_file: " + p.ca.file + " holds no revocation list",
		"listeners[14].crl_file: " + p.otherCRL + ", list 1 (issuer CN=another-ca): not signed by any authority of the CA file",
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in:\n%v", w, err)
		}
	}
	var n int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var le *Error
		if !errors.As(e, &le) || !strings.HasPrefix(le.Key, "listeners[") {
			t.Errorf("%v is not an *Error with a full key", e)
		}
		n++
	}
	if n != len(want) {
		t.Errorf("%d errors, want %d:\n%v", n, len(want), err)
	}
	if err := (Configs{{}, {Type: WS}, {Type: TLS, CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.ca.file}}).Validate(); err != nil {
		t.Errorf("a good list: %v", err)
	}
}

func TestConfigYAML(t *testing.T) {
	var doc struct {
		Listeners Configs `yaml:"listeners"`
	}
	src := `listeners:
  - type: tls
    address: ":8883"
    cert_file: /etc/linemq/gw.crt
    key_file: /etc/linemq/gw.key
    ca_file: /etc/linemq/ca.pem
    require_client_cert: true
    max_connections: 200
  - type: ws
    path: /mqtt
    max_connections: unlimited
`
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	if l := doc.Listeners; len(l) != 2 || l[0].MaxConnections != 200 || !l[0].RequireClientCert || l[1].MaxConnections != Unlimited {
		t.Errorf("%+v", l)
	}
	err := yaml.Unmarshal([]byte("listeners:\n  - type: tcp\n    max_connections: 0\n"), &doc)
	if err == nil || !strings.Contains(err.Error(), "0 is not allowed") {
		t.Errorf("max_connections: 0: %v", err)
	}
	if d := (Config{}).WithDefaults(); d.Type != TCP || d.Address != ":1883" || d.MaxConnections != DefaultMaxConnections || d.Path != "" {
		t.Errorf("defaults %+v", d)
	}
	if d := (Config{Type: WSS}).WithDefaults(); d.Address != ":8084" || d.Path != "/mqtt" {
		t.Errorf("wss defaults %+v", d)
	}
}
