package auth

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestVerify: the check behind the status page's login answers like a
// CONNECT's, and shares its throttle with MQTT logins from the address.
func TestVerify(t *testing.T) {
	dir := t.TempDir()
	h, err := NewHash([]byte("s3cret"), 10)
	if err != nil {
		t.Fatal(err)
	}
	pw := writeFile(t, dir, "passwd", "ops:"+h+"\n")
	a, err := New(Config{PasswordFile: pw}, Options{FreeFailures: 2, FailureDelay: time.Hour, MaxFailureDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := a.Verify(ctx, tcp("10.0.0.1"), "ops", []byte("s3cret")); err != nil {
		t.Errorf("right password: %v", err)
	}
	for _, c := range []struct{ user, pw string }{{"ops", "wrong"}, {"nobody", "s3cret"}, {"", ""}} {
		if err := a.Verify(ctx, tcp("10.0.0.2"), c.user, []byte(c.pw)); !errors.Is(err, ErrBadLogin) {
			t.Errorf("%q/%q: %v, want ErrBadLogin", c.user, c.pw, err)
		}
	}
	// Two failures were free (the empty user name is not a check); the
	// third check's slot is an hour later, longer than ctx allows: refused
	// unchecked, right password or not.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := a.Verify(short, tcp("10.0.0.2"), "ops", []byte("s3cret")); !errors.Is(err, ErrThrottled) {
		t.Errorf("after failures: %v, want ErrThrottled", err)
	}
	if err := a.Verify(ctx, tcp("10.0.0.3"), "ops", []byte("s3cret")); err != nil {
		t.Errorf("another address: %v", err)
	}

	none, err := New(Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := none.Verify(ctx, tcp("127.0.0.1"), "ops", []byte("s3cret")); !errors.Is(err, ErrNoPasswordFile) {
		t.Errorf("without a password file: %v", err)
	}
}
