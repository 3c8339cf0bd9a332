package gateway_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/auth"
)

// TestStatusPageLogin: with a password file the status page, the API and
// /metrics ask for a login over real HTTP (no or wrong credentials 401, a
// user outside http.users 403, the right ones 200) while the probes stay
// open; Reload (SIGHUP) makes a changed password count at once.
func TestStatusPageLogin(t *testing.T) {
	pwfile := filepath.Join(t.TempDir(), "passwd")
	writeUsers := func(users ...string) {
		t.Helper()
		var text string
		for i := 0; i < len(users); i += 2 {
			h, err := auth.NewHash([]byte(users[i+1]), 100)
			if err != nil {
				t.Fatal(err)
			}
			text += users[i] + ":" + h + "\n"
		}
		if err := os.WriteFile(pwfile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeUsers("ops", "op-pass", "plc-1", "plc-pass")
	cfg := testConfig(t)
	cfg.Auth.PasswordFile = pwfile
	cfg.HTTP.Listen = new("127.0.0.1:0")
	cfg.HTTP.Users = []string{"ops"}
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	base := "http://" + g.HTTPAddr().String()

	status := func(path, user, pw string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, pw)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without a challenge", path)
		}
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, user, pw string
		want           int
	}{
		{"/", "", "", http.StatusUnauthorized},
		{"/api/v1/status", "", "", http.StatusUnauthorized},
		{"/metrics", "", "", http.StatusUnauthorized},
		{"/api/v1/status", "ops", "wrong", http.StatusUnauthorized},
		{"/api/v1/status", "nobody", "op-pass", http.StatusUnauthorized},
		{"/api/v1/status", "plc-1", "plc-pass", http.StatusForbidden}, // a user, but not one of http.users
		{"/", "ops", "op-pass", http.StatusOK},
		{"/static/app.js", "ops", "op-pass", http.StatusOK},
		{"/api/v1/status", "ops", "op-pass", http.StatusOK},
		{"/metrics", "ops", "op-pass", http.StatusOK},
		{"/healthz", "", "", http.StatusOK},
		{"/readyz", "", "", http.StatusOK},
	} {
		if got := status(c.path, c.user, c.pw); got != c.want {
			t.Errorf("GET %s as %q/%q: %d, want %d", c.path, c.user, c.pw, got, c.want)
		}
	}

	// The password changes; after the reload only the new one works,
	// although the old one had just been accepted (and remembered).
	writeUsers("ops", "new-pass")
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := status("/api/v1/status", "ops", "op-pass"); got != http.StatusUnauthorized {
		t.Errorf("old password after reload: %d, want 401", got)
	}
	if got := status("/api/v1/status", "ops", "new-pass"); got != http.StatusOK {
		t.Errorf("new password after reload: %d, want 200", got)
	}
}
