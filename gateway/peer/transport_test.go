package peer_test

import (
	"testing"

	"github.com/linemq/linemq/gateway/peer"
	"github.com/linemq/linemq/gateway/peer/peertest"
	"github.com/linemq/linemq/internal/certtest"
)

func TestGRPCTransport(t *testing.T) {
	peertest.TestTransport(t, func(*testing.T) peer.Transport { return peer.NewGRPC(peer.GRPCOptions{}) })
}

// Mutual TLS with certificates that name their node: the suite's two ends
// are "acceptor" and "dialer", so one certificate names both.
func TestGRPCTransportTLS(t *testing.T) {
	cfg := certtest.NewCA(t, "line-ca").Issue(t, "acceptor", "dialer")
	peertest.TestTransport(t, func(*testing.T) peer.Transport { return peer.NewGRPC(peer.GRPCOptions{TLS: cfg}) })
}
