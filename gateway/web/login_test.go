package web

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/auth"
)

// TestLoginThrottled: an address that keeps failing the status page's
// login is slowed down as an MQTT client would be, and then refused with
// 429 without a check, even with the right password; the probes stay open.
func TestLoginThrottled(t *testing.T) {
	h, err := auth.NewHash([]byte("op-pass"), 10)
	if err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(pw, []byte("ops:"+h+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{PasswordFile: pw}, auth.Options{FreeFailures: 2, FailureDelay: time.Hour, MaxFailureDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := brokertest.RunServer(t, broker.Options{})
	_, base := startWeb(t, Options{Broker: srv, NodeID: "gw", Login: &Login{Verifier: a}})

	status := func(user, pw string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/api/v1/status", nil)
		req.SetBasicAuth(user, pw)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("ops", "op-pass"); got != http.StatusOK {
		t.Fatalf("right password: %d", got)
	}
	for i := range 2 { // the two free failures
		if got := status("ops", "guess"); got != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d, want 401", i+1, got)
		}
	}
	// The next check's slot is an hour away, past the login's timeout.
	if got := status("ops", "another-guess"); got != http.StatusTooManyRequests {
		t.Errorf("after two failures: %d, want 429", got)
	}
	// A remembered login is not held up by the failures of its address.
	if got := status("ops", "op-pass"); got != http.StatusOK {
		t.Errorf("remembered login: %d, want 200", got)
	}
	if code, _ := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("readyz: %d, want 503 (not ready, but answered)", code)
	}
}
