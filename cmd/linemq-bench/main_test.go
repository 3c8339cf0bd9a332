package main

import (
	"bytes"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
)

// runCmd runs the command with args and returns its exit status and output.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(args, &stdout, &stderr) }()
	select {
	case code := <-done:
		return code, stdout.String(), stderr.String()
	case <-time.After(20 * time.Second):
		t.Fatalf("linemq-bench %q did not finish", args)
		return 0, "", ""
	}
}

func TestJSONOnly(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	code, out, errOut := runCmd(t, "-broker", addr, "-publishers", "2", "-workers", "2", "-count", "250",
		"-qos", "1", "-mqtt", "311", "-json", "-label", "ci")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("-json printed %q, want exactly one line", out)
	}
	var res struct {
		Label      string   `json:"label"`
		MQTT       string   `json:"mqtt"`
		Published  int64    `json:"published"`
		Delivered  int64    `json:"delivered"`
		Lost       int64    `json:"lost"`
		Duplicates int64    `json:"duplicates"`
		ShareMin   *float64 `json:"share_min"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("JSON line does not parse: %v\n%s", err, out)
	}
	if res.Label != "ci" || res.MQTT != "3.1.1" || res.Published != 500 || res.Delivered != 500 ||
		res.Lost != 0 || res.Duplicates != 0 || res.ShareMin == nil {
		t.Errorf("result %+v", res)
	}
}

func TestTableThenJSON(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	code, out, errOut := runCmd(t, "-broker", addr, "-scenario", "fanout", "-publishers", "1", "-subscribers", "3",
		"-count", "100", "-qos", "2", "-rate", "1000", "-drain", "2s")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for _, want := range []string{"linemq-bench fanout", "lost / duplicates", "0 / 0", "latency p50 / p99 / p999", "bench cpu"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, out)
	}
	if m["delivered"] != 300.0 || m["latency_p99_ms"] == nil {
		t.Errorf("delivered %v, latency p99 %v: want 300 and a value", m["delivered"], m["latency_p99_ms"])
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-qos", "3"},
		{"-mqtt", "4.0"},
		{"-scenario", "fanall"},
		{"-scenario", "conns"}, // needs -pid
		{"-publishers", "0"},
		{"-worker-receive-max", "70000"},
		{"-duration", "0"},
		{"-nosuchflag"},
		{"extra"},
	} {
		code, out, errOut := runCmd(t, args...)
		if code != 2 || out != "" || errOut == "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2, nothing, a message", args, code, out, errOut)
		}
	}
	if code, _, _ := runCmd(t, "-help"); code != 0 {
		t.Errorf("-help: exit %d, want 0", code)
	}
}

func TestUnreachableBroker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	code, out, errOut := runCmd(t, "-broker", addr, "-count", "10", "-timeout", "2s")
	if code != 1 || out != "" || !strings.Contains(errOut, "connection refused") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and the dial error", code, out, errOut)
	}
}
