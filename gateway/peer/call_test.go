package peer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
)

// callHandler is a handler that also answers calls.
type callHandler struct {
	*handler
	call func(from, method string, arg []byte) ([]byte, error)
}

func (h callHandler) Call(from, method string, arg []byte) ([]byte, error) {
	return h.call(from, method, arg)
}

func TestCall(t *testing.T) {
	release := make(chan struct{})
	hb := callHandler{handler: newHandler(), call: func(from, method string, arg []byte) ([]byte, error) {
		switch method {
		case "echo":
			return append([]byte(from+":"), arg...), nil
		case "fail":
			return nil, errors.New("no such thing")
		case "hang":
			<-release
		}
		return nil, nil
	}}
	a := startNode(t, "a", fast(Options{}))
	b := startNode(t, "b", fast(Options{Handler: hb}))
	connect(a, b)
	waitAvailable(t, a, "b", true)
	waitAvailable(t, b, "a", true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// A large argument and result cross in one record each.
	big := strings.Repeat("x", 600<<10)
	got, err := a.Call(ctx, "b", "echo", []byte(big))
	if err != nil || string(got) != "a:"+big {
		t.Fatalf("echo: %d bytes, %v", len(got), err)
	}
	var re *RemoteError
	if _, err := a.Call(ctx, "b", "fail", nil); !errors.As(err, &re) || re.Msg != "no such thing" || re.Node != "b" {
		t.Fatalf("fail: %v", err)
	}
	// A node whose handler is no Caller says so.
	if _, err := b.Call(ctx, "a", "echo", nil); !errors.As(err, &re) || !strings.Contains(re.Msg, "answers no calls") {
		t.Fatalf("call to a node without a Caller: %v", err)
	}
	if _, err := a.Call(ctx, "nobody", "echo", nil); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("unknown peer: %v", err)
	}
	// A caller that gives up gets its context's error; the late answer is
	// dropped.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err := a.Call(short, "b", "hang", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hang: %v", err)
	}
	// A call in progress when the stream breaks fails with ErrBroken.
	done := make(chan error, 1)
	go func() { _, err := a.Call(ctx, "b", "hang", nil); done <- err }()
	waiting := func() bool {
		l := (*a.links.Load())["b"]
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.calls) == 1
	}
	brokertest.Eventually(t, 5*time.Second, "the call to go out", waiting)
	// b's Close waits for its handler's calls to return: released below.
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrBroken) {
			t.Fatalf("call across a broken stream: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("call across a broken stream never ended")
	}
	close(release)
	<-closed
	if _, err := a.Call(ctx, "b", "echo", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("call to a node that is down: %v", err)
	}
}
