//go:build browser

package web

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
)

// oneLogin is a Verifier that knows one user and password.
type oneLogin struct{ user, password string }

func (v oneLogin) Verify(_ context.Context, _ net.Addr, user string, password []byte) error {
	if user != v.user || string(password) != v.password {
		return errors.New("wrong user name or password")
	}
	return nil
}

// TestStatusPageLoginFailedInBrowser: a page whose API answers 401 says
// that the login failed, in the banner, from the first poll on; it does
// not sit on "…" as if the gateway were still loading. The browser got the
// page but its requests to the API are refused: the page's files come
// with the right login (added here on their way to the server), the API's
// requests without one, and their login dialogs are cancelled, as a user
// who does not know the password does.
func TestStatusPageLoginFailedInBrowser(t *testing.T) {
	exe := chromium()
	if exe == "" {
		t.Skip("no Chromium at /usr/bin/chromium (Debian: apt-get install chromium; or set LINEMQ_CHROMIUM): the status page browser test needs one")
	}
	srv, _ := brokertest.RunServer(t, broker.Options{})
	s, err := New(Options{Broker: srv, NodeID: "gw", Login: &Login{Verifier: oneLogin{"ops", "right"}}})
	if err != nil {
		t.Fatal(err)
	}
	var apiRequests atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			apiRequests.Add(1)
		} else {
			r.SetBasicAuth("ops", "right")
		}
		s.ServeHTTP(w, r)
	}))
	defer ts.Close()
	ctx := newBrowser(t, exe)

	cancelLoginDialogs(t, ctx)

	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(c, chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#banner"))); err != nil {
		t.Fatalf("waiting for the banner: %v", err)
	}
	banner, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("#banner")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(banner, "Login failed (HTTP 401)") {
		t.Errorf("banner %q: does not say the login failed", banner)
	}
	// Polling on would ask for a login again every second.
	n := apiRequests.Load()
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if got := apiRequests.Load(); got > n+1 {
			t.Fatalf("the page still polls the API after a refused login: %d requests, then %d", n, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cancelLoginDialogs answers every login challenge in the browser's tab as
// a user who cancels the dialog does. Headless Chromium has no dialog: a
// request answered with a Basic challenge would wait for the DevTools
// client to answer it.
func cancelLoginDialogs(t *testing.T, ctx context.Context) {
	t.Helper()
	lctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	auths := chromedp.Events(lctx, fetch.AuthRequired)
	paused := chromedp.Events(lctx, fetch.RequestPaused)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			chromedp.Call(lctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	}()
	go func() {
		for ev, err := range auths {
			if err != nil {
				return
			}
			chromedp.Call(lctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID,
				AuthChallengeResponse: &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}})
		}
	}()
	handle := true
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &handle}); err != nil {
		t.Fatal(err)
	}
}

// TestStatusPageURLCredentialsInBrowser: a page opened with the login in
// its address (http://ops:right@host/) works: its requests to the API go
// to the same address without the user name and password, which the
// browser refuses to send from a page, and carry the login the browser
// keeps for the page.
func TestStatusPageURLCredentialsInBrowser(t *testing.T) {
	exe := chromium()
	if exe == "" {
		t.Skip("no Chromium at /usr/bin/chromium (Debian: apt-get install chromium; or set LINEMQ_CHROMIUM): the status page browser test needs one")
	}
	srv, _ := brokertest.RunServer(t, broker.Options{})
	_, base := startWeb(t, Options{Broker: srv, NodeID: "gw-url-login", Login: &Login{Verifier: oneLogin{"ops", "right"}}})
	ctx := newBrowser(t, exe)
	cancelLoginDialogs(t, ctx)

	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(c, chromedp.Navigate(strings.Replace(base, "http://", "http://ops:right@", 1)+"/")); err != nil {
		t.Fatal(err)
	}
	ok := `document.getElementById("node-id").textContent === "gw-url-login" && document.getElementById("banner").classList.contains("hidden")`
	if _, err := chromedp.Run(c, chromedp.Poll[bool](ok, chromedp.WithPollingTimeout(15*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		state, _ := chromedp.Run(c, chromedp.Evaluate[string](`document.getElementById("node-id").textContent + " | " + document.getElementById("banner").textContent`))
		t.Fatalf("the page did not show the gateway (%v): %q", err, state)
	}
}
