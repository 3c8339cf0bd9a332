package gateway_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/sparkplug"
	"github.com/linemq/linemq/internal/mqtttest"
)

// tahuDir holds the independent edge node (Eclipse Tahu's JavaScript
// client, sparkplug-client); make test installs its modules there.
const tahuDir = "sparkplug/testdata/tahu"

// tahuEdge is edge.js running as a process.
type tahuEdge struct {
	cmd    *exec.Cmd
	events chan map[string]any
}

// startTahu runs edge.js against addr; it skips the test when Node.js or
// the modules are missing (make test and .ci/run install them).
func startTahu(t *testing.T, args ...string) *tahuEdge {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("Node.js is not installed: the Tahu edge node test needs it (make test installs its modules, .ci/run Node.js)")
	}
	if _, err := os.Stat(filepath.Join(tahuDir, "node_modules", "sparkplug-client")); err != nil {
		t.Skipf("Tahu's sparkplug-client is not installed: run npm ci --prefix gateway/%s (make test does)", tahuDir)
	}
	cmd := exec.Command(node, append([]string{filepath.Join(tahuDir, "edge.js")}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &tahuEdge{cmd: cmd, events: make(chan map[string]any, 64)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				e.events <- ev
			}
		}
		io.Copy(io.Discard, out)
		close(e.events)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return e
}

// await waits for the edge node to print event.
func (e *tahuEdge) await(t *testing.T, event string) map[string]any {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-e.events:
			if !ok {
				t.Fatalf("edge.js exited before %q", event)
			}
			if ev["event"] == "error" {
				t.Fatalf("edge.js: %v", ev["msg"])
			}
			if ev["event"] == event {
				return ev
			}
		case <-deadline:
			t.Fatalf("edge.js did not print %q within 20s", event)
		}
	}
}

// TestSparkplugTahuEdgeNode: an independent edge node (Eclipse Tahu's
// sparkplug-client) births itself and a device, sends 300 DDATA (its
// sequence wrapping past 255) and an NDATA; the certificates, the API and
// /metrics say what it did; a rebirth asked on the API reaches it and it
// births again; SIGKILLed, it dies without DISCONNECT and its NDEATH will
// (bdSeq in a UInt64 metric, as Tahu writes it) marks it offline.
func TestSparkplugTahuEdgeNode(t *testing.T) {
	pwfile := opsPasswordFile(t)
	g := startSparkplugGateway(t, func(c *config.Config) {
		c.Auth.PasswordFile = pwfile
		c.Auth.AllowAnonymous = new(true)
	})
	addr := g.MQTTAddr().String()
	api := func(method, path, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+g.HTTPAddr().String()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("ops", "op-pass")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	state := func() sparkplug.EdgeNode {
		resp := api(http.MethodGet, "/api/v1/sparkplug", "")
		defer resp.Body.Close()
		var s sparkplugState
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		n, _ := edgeState(s, "Plant", "Node8")
		return n
	}
	host, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "scada", CleanStart: true}, nil)
	host.Sub("spBv1.0/Plant/#", 1)

	edge := startTahu(t, "--url", "mqtt://"+addr, "--group", "Plant", "--edge", "Node8", "--device", "Dev1", "--data", "300", "--client-id", "tahu-node8")
	edge.await(t, "ready")
	brokertest.Eventually(t, 10*time.Second, "the Tahu edge node's state in the API", func() bool {
		n := state()
		return n.Online && n.BdSeq == 0 && n.WillBdSeq == 0 && !n.Mismatch && n.Births == 1 && n.Messages == 303 &&
			n.SeqGaps == 0 && n.OutOfOrder == 0 && n.Invalid == 0 && n.Devices == 1 && n.DevicesOn == 1 && n.Client == "tahu-node8"
	})
	certs, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "certs", CleanStart: true}, nil)
	certs.Sub("$sparkplug/certificates/spBv1.0/Plant/#", 1)
	if a, b := certs.Next(), certs.Next(); a.Topic != "$sparkplug/certificates/spBv1.0/Plant/NBIRTH/Node8" ||
		b.Topic != "$sparkplug/certificates/spBv1.0/Plant/DBIRTH/Node8/Dev1" || !a.Retain || !b.Retain {
		t.Fatalf("certificates %s (retain %v), %s (retain %v)", a.Topic, a.Retain, b.Topic, b.Retain)
	}

	resp := api(http.MethodPost, "/api/v1/sparkplug/rebirth", `{"group":"Plant","edge_node":"Node8"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("rebirth: %s", resp.Status)
	}
	edge.await(t, "rebirth")
	brokertest.Eventually(t, 10*time.Second, "the rebirth counted", func() bool { return state().Births == 2 })

	edge.cmd.Process.Signal(syscall.SIGKILL)
	for {
		m := host.Next()
		if m.Topic == "spBv1.0/Plant/NDEATH/Node8" {
			p, err := sparkplug.Decode(m.Payload, true)
			if err != nil || !p.HasBdSeq || p.BdSeq != 0 {
				t.Errorf("NDEATH payload %+v %v", p, err)
			}
			break
		}
	}
	brokertest.Eventually(t, 10*time.Second, "the edge node offline", func() bool {
		n := state()
		return !n.Online && n.Deaths == 1 && n.DevicesOn == 0
	})
	resp = api(http.MethodGet, "/metrics", "")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{`linemq_sparkplug_edge_online{edge_node="Node8",group="Plant"} 0`,
		`linemq_sparkplug_births_total{group="Plant"} 2`, `linemq_sparkplug_deaths_total{group="Plant"} 1`} {
		if !strings.Contains(string(body), "\n"+line+"\n") {
			t.Errorf("/metrics has no line %s", line)
		}
	}
}
