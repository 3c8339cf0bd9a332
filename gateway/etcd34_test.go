package gateway_test

import (
	"bytes"
	"crypto/tls"
	"github.com/linemq/linemq/internal/certtest"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/config"
)

// externalEtcd is an etcd server run from its binary (Debian's etcd-server
// package installs etcd 3.4 as /usr/bin/etcd), a single member on loopback
// ports chosen free by the test, its data in a temporary directory.
type externalEtcd struct {
	t         *testing.T
	args      []string
	clientURL string
	cmd       *exec.Cmd
	out       *bytes.Buffer
	tls       *tls.Config // the health probe's, with TLS
}

// startExternalEtcd starts bin; with ca set, it serves clients over TLS
// with a certificate of ca and requires theirs (--client-cert-auth).
func startExternalEtcd(t *testing.T, bin string, ca *certtest.CA) *externalEtcd {
	t.Helper()
	peerURL, clientURL := freeURL(t), freeURL(t)
	if ca != nil {
		clientURL = "https" + strings.TrimPrefix(clientURL, "http")
	}
	e := &externalEtcd{t: t, clientURL: clientURL, args: []string{
		"--name", "e1", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e1=" + peerURL, "--logger", "zap", "--log-outputs", "stderr",
	}}
	if ca != nil {
		cert, key := ca.Files(t, "etcd", "127.0.0.1")
		e.args = append(e.args, "--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca.File, "--client-cert-auth")
		e.tls = ca.Issue(t, "probe", "127.0.0.1")
		e.tls.MinVersion = 0 // the client's default, for Debian's etcd 3.4
	}
	e.start(bin)
	t.Cleanup(e.kill)
	return e
}

// start runs the binary and waits, with a deadline, until /health says
// true.
func (e *externalEtcd) start(bin string) {
	e.t.Helper()
	e.out = &bytes.Buffer{}
	e.cmd = exec.Command(bin, e.args...)
	e.cmd.Stdout, e.cmd.Stderr = e.out, e.out
	if err := e.cmd.Start(); err != nil {
		e.t.Fatalf("starting %s: %v", bin, err)
	}
	hc := http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: e.tls}}
	var err error
	healthy := func() bool {
		var resp *http.Response
		if resp, err = hc.Get(e.clientURL + "/health"); err != nil {
			return false
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && strings.Contains(b.String(), `"true"`)
	}
	if !brokertest.Until(30*time.Second, healthy) {
		e.kill()
		e.t.Fatalf("etcd not healthy after 30s (last: %v); its output:\n%s", err, e.out)
	}
}

// kill ends the process (SIGKILL: what a crash looks like to clients) and
// waits for it; it does nothing if it is not running.
func (e *externalEtcd) kill() {
	if e.cmd == nil || e.cmd.Process == nil {
		return
	}
	e.cmd.Process.Signal(syscall.SIGKILL)
	e.cmd.Wait()
	e.cmd = nil
}

// TestExternalEtcd34 runs the cluster against the etcd binary on PATH as an
// external endpoint: Debian's etcd-server, etcd 3.4, in CI (.ci/run
// installs it). Two gateways share a group, with a member on each and
// publishes split between them; the registry then stays in step while
// nothing happens (it depends on 3.4 answering progress requests), loses
// etcd (SIGKILL), reports degraded, re-reads its copy once etcd is back on
// the same data, and routes as before to old and new members.
func TestExternalEtcd34(t *testing.T) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd is not on PATH: apt-get install etcd-server (Debian's etcd 3.4) to run this compatibility test; CI installs it")
	}
	if out, err := exec.Command(bin, "--version").Output(); err == nil {
		t.Logf("%s", bytes.TrimSpace(out))
	}
	e := startExternalEtcd(t, bin, nil)
	external := func(c *config.Config) { c.Cluster.Etcd.Endpoints = []string{e.clientURL} }
	gw1 := startGateway(t, "gw1", external)
	gw2 := startGateway(t, "gw2", external)
	splitScenario(t, gw1, gw2, "a")

	// Quiet for longer than the registry's watch timeout (5 s): the
	// watch is kept alive by progress notifications alone. A server that
	// did not answer progress requests would make the registry give the
	// watch up as silent, and report degraded on the way.
	quiet := time.Now().Add(6 * time.Second)
	for time.Now().Before(quiet) {
		for _, g := range []*struct {
			name string
			ok   bool
		}{{"gw1", clusterHealthy(gw1)}, {"gw2", clusterHealthy(gw2)}} {
			if !g.ok {
				t.Fatalf("%s: cluster health left OK while nothing happened (progress notifications not answered?)", g.name)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}

	// etcd dies: both registries give their watch up as silent (after 5 s)
	// and keep trying to re-read.
	e.kill()
	for _, g := range []*gateway.Gateway{gw1, gw2} {
		brokertest.Eventually(t, 20*time.Second, "the registry degraded, its watch given up", func() bool {
			m := scrape(t, g)
			return m[`linemq_cluster_registry_state{state="degraded"}`] == 1 && m["linemq_cluster_registry_watch_lost_total"] >= 1
		})
	}
	// Back on the same data: each registry re-reads and diffs, and is in
	// step again; the old group still splits, and a new one forms.
	e.start(bin)
	brokertest.Eventually(t, 30*time.Second, "both registries in step again", func() bool {
		return clusterHealthy(gw1) && clusterHealthy(gw2)
	})
	for _, g := range []*gateway.Gateway{gw1, gw2} {
		m := scrape(t, g)
		if m["linemq_cluster_registry_resyncs_total"] < 1 || m["linemq_cluster_registry_nodes"] != 2 || m["linemq_cluster_registry_members"] != 2 {
			t.Errorf("after etcd returned: resyncs %v, nodes %v, members %v; want >= 1, 2, 2",
				m["linemq_cluster_registry_resyncs_total"], m["linemq_cluster_registry_nodes"], m["linemq_cluster_registry_members"])
		}
	}
	if n := groupMembers(gw1, "a"); n != 2 {
		t.Errorf("after the re-read gw1 has %d members of a, want 2", n)
	}
	splitScenario(t, gw1, gw2, "b")
	if m := scrape(t, gw1); m["linemq_cluster_registry_members"] != 4 {
		t.Errorf("gw1's copy holds %v members, want 4", m["linemq_cluster_registry_members"])
	}
}

// TestExternalEtcdTLS: the same etcd binary serving clients over TLS only,
// client certificates required; two gateways reach it with
// cluster.etcd.tls and share a group.
func TestExternalEtcdTLS(t *testing.T) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd is not on PATH: apt-get install etcd-server (Debian's etcd 3.4) to run this test; CI installs it")
	}
	ca := certtest.NewCA(t, "etcd CA")
	e := startExternalEtcd(t, bin, ca)
	external := func(c *config.Config) {
		cert, key := ca.Files(t, c.NodeID+"-etcd", "127.0.0.1")
		c.Cluster.Etcd.Endpoints = []string{e.clientURL}
		c.Cluster.Etcd.TLS = config.EtcdTLS{CAFile: ca.File, CertFile: cert, KeyFile: key}
	}
	gw1 := startGateway(t, "gw1", external)
	gw2 := startGateway(t, "gw2", external)
	splitScenario(t, gw1, gw2, "s")
}
