package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
)

// slotsShown is an Updater that shows a fixed panel and records uploads:
// the slots themselves are gateway/update's, tested there and end to end
// in cmd/linemq (TestUpdateUpload).
type slotsShown struct{ got []byte }

func (u *slotsShown) Status() any { return map[string]any{"version": "v1", "running_in": "image"} }

func (u *slotsShown) Install(r io.Reader, user string) (any, error) {
	b, err := io.ReadAll(r)
	u.got = b
	return map[string]any{"restarting": true, "user": user}, err
}

// TestUpdateEndpoints: the panel is served where the gateway manages its
// slots and says so where it does not; an upload needs a login and an
// admin, and a body bigger than MaxUpload is refused.
func TestUpdateEndpoints(t *testing.T) {
	srv, _ := brokertest.RunServer(t, broker.Options{})
	post := func(base string, body io.Reader) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/api/v1/update", body)
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e errorJSON
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error
	}

	_, none := startWeb(t, Options{Broker: srv, NodeID: "embedded"})
	var panel map[string]any
	getJSON(t, none+"/api/v1/update", &panel)
	if panel["configured"] != false {
		t.Errorf("without slots: %v", panel)
	}
	if code, msg := post(none, strings.NewReader("x")); code != http.StatusNotFound || !strings.Contains(msg, "not managed") {
		t.Errorf("upload without slots: %d %q", code, msg)
	}

	u := &slotsShown{}
	_, open := startWeb(t, Options{Broker: srv, NodeID: "gw", Update: u})
	getJSON(t, open+"/api/v1/update", &panel)
	if panel["configured"] != true || panel["version"] != "v1" {
		t.Errorf("with slots: %v", panel)
	}
	var st struct{ Update map[string]any }
	getJSON(t, open+"/api/v1/status", &st)
	if st.Update["running_in"] != "image" {
		t.Errorf("status.update: %v", st.Update)
	}
	if code, msg := post(open, strings.NewReader("x")); code != http.StatusForbidden || !strings.Contains(msg, "update.admins") {
		t.Errorf("upload without a login: %d %q", code, msg)
	}
	if u.got != nil {
		t.Error("a refused upload reached the slots")
	}

	// With a login: an admin may upload; a body over MaxUpload is cut
	// off and answered 413 (MaxUpload); a user not among the admins gets 403.
	_, withLogin := startWeb(t, Options{Broker: srv, NodeID: "gw", Update: u, MaxUpload: 1 << 20,
		Login: &Login{Verifier: passwordPW{}, Admins: []string{"ops"}}})
	upload := func(user string, size int) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, withLogin+"/api/v1/update", io.LimitReader(zeros{}, int64(size)))
		req.Header.Set("Content-Type", "application/octet-stream")
		req.SetBasicAuth(user, "pw")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := upload("ops", 1000); code != http.StatusOK || len(u.got) != 1000 {
		t.Errorf("an admin's upload: %d, %d bytes reached the slots", code, len(u.got))
	}
	if code := upload("ops", 1<<20+1); code != http.StatusRequestEntityTooLarge {
		t.Errorf("an oversized upload: %d", code)
	}
	u.got = nil
	if code := upload("viewer", 10); code != http.StatusForbidden || u.got != nil {
		t.Errorf("a user not among the admins: %d", code)
	}
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// passwordPW accepts any user whose password is "pw".
type passwordPW struct{}

func (passwordPW) Verify(_ context.Context, _ net.Addr, _ string, password []byte) error {
	if string(password) != "pw" {
		return errors.New("wrong password")
	}
	return nil
}
