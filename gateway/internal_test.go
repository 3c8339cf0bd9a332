package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/gateway/config"
)

// TestListenerFailureStops checks that a listener that breaks while the
// gateway runs stops the gateway, and that Wait reports why.
func TestListenerFailureStops(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.MQTT.Listen = new("127.0.0.1:0")
	g, err := Start(t.Context(), Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	g.mqtt.Close() // as if the socket had failed under the broker

	select {
	case <-g.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("gateway still running 5s after its listener failed")
	}
	err = g.Wait()
	if err == nil || !strings.HasPrefix(err.Error(), "gateway: mqtt listener 127.0.0.1:") {
		t.Errorf("Wait = %v, want the listener's failure", err)
	}
	if err2 := g.Close(); err2 != err {
		t.Errorf("Close = %v, want %v as Wait", err2, err)
	}
}
