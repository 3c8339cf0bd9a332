package main

import (
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/internal/certtest"
)

// readyListenersRE reads the ready line as scripts do: mqtt= first, http=
// right after it, then the configured listeners.
var readyListenersRE = regexp.MustCompile(`msg=ready .*mqtt=(\S+) http=(\S+) listeners="([^"]*)"`)

// TestReadyNamesListeners starts the daemon with the mqtt.listen shortcut
// and a tcp, a tls and a ws listener from the file: the ready line must
// name each of them with the port it was given for :0, after mqtt= and
// http=, and each address must accept connections.
func TestReadyNamesListeners(t *testing.T) {
	dir := t.TempDir()
	cert, key := certtest.NewCA(t, "linemq-test-ca").Files(t, "127.0.0.1")
	cfgFile := filepath.Join(dir, "linemq.yaml")
	writeFile(t, cfgFile, `listeners:
  - type: tcp
    address: 127.0.0.1:0
  - type: tls
    address: 127.0.0.1:0
    cert_file: `+cert+`
    key_file: `+key+`
  - type: ws
    address: 127.0.0.1:0
`)
	d := start(t,
		"-config", cfgFile,
		"-mqtt-listen", "127.0.0.1:0",
		"-http-listen", "127.0.0.1:0",
		"-data-dir", filepath.Join(dir, "data"),
	)
	m := d.waitLine(t, readyListenersRE, 30*time.Second)
	if m[1] == "127.0.0.1:0" || m[2] == "127.0.0.1:0" {
		t.Errorf("mqtt=%s http=%s: not the bound ports", m[1], m[2])
	}
	// The other tests' pattern must still find both addresses.
	if am := readyAddrsRE.FindStringSubmatch(m[0]); am == nil || am[1] != m[1] || am[2] != m[2] {
		t.Errorf("readyAddrsRE reads %q from %q", am, m[0])
	}

	us := strings.Fields(m[3])
	wantSchemes := []string{"mqtt", "mqtts", "ws"}
	if len(us) != len(wantSchemes) {
		t.Fatalf("listeners=%q: want %d listeners", m[3], len(wantSchemes))
	}
	for i, s := range us {
		u, err := url.Parse(s)
		if err != nil {
			t.Errorf("listener %d: %v", i, err)
			continue
		}
		if u.Scheme != wantSchemes[i] {
			t.Errorf("listener %d: %s: scheme %q, want %q", i, s, u.Scheme, wantSchemes[i])
		}
		if u.Port() == "0" || u.Port() == "" {
			t.Errorf("listener %d: %s: not the bound port", i, s)
			continue
		}
		if wantSchemes[i] == "ws" && u.Path != "/mqtt" {
			t.Errorf("listener %d: %s: path %q, want /mqtt", i, s, u.Path)
		}
		c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			t.Errorf("listener %d: %s: %v", i, s, err)
			continue
		}
		c.Close()
	}
}
