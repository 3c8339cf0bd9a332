package zaplog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestFieldsAndLevelsReachSlog(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	z := New(l, "etcd").With(zap.String("member", "gw1"))
	z.Debug("hidden")
	z.Info("started", zap.Duration("took", 1500*time.Millisecond), zap.Int("peers", 2))
	z.Error("failed", zap.Error(errors.New("disk full")))
	out := buf.String()
	for _, want := range []string{
		"level=INFO msg=started component=etcd member=gw1 took=1.5s peers=2",
		`level=ERROR msg=failed component=etcd member=gw1 error="disk full"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hidden") {
		t.Errorf("a debug line passed an info handler:\n%s", out)
	}
}

func TestNilLoggerIsNop(t *testing.T) {
	New(nil, "x").Error("nobody hears this")
}

// TestClosingIsNotAnError: etcd's reports of its own servers closing
// (dozens of ERROR lines per normal stop) reach slog at debug level;
// other errors keep theirs.
func TestClosingIsNotAnError(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	z := New(l, "etcd")
	z.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("accept tcp 127.0.0.1:2379: use of closed network connection")))
	z.Warn("stopping insecure grpc server due to error", zap.Error(errors.New("mux: server closed")))
	z.Error("failed", zap.Error(errors.New("disk full")))
	out := buf.String()
	if strings.Contains(out, "setting up serving") || strings.Contains(out, "stopping insecure grpc") {
		t.Errorf("a server closing was logged at info or above:\n%s", out)
	}
	if !strings.Contains(out, `level=ERROR msg=failed component=etcd error="disk full"`) {
		t.Errorf("a real error lost its level:\n%s", out)
	}
}
