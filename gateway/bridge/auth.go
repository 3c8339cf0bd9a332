package bridge

import (
	"context"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
)

// Trusted wraps the gateway's authenticator so that a bridge's in-process
// connection (which no network client can open: its address is a type
// only this package makes) may connect, publish and subscribe whatever the
// password and ACL files say; every other client is decided by a.
func Trusted(a broker.Authenticator) broker.Authenticator { return trusted{a} }

type trusted struct{ broker.Authenticator }

func isBridge(c broker.ClientInfo) bool {
	_, ok := c.RemoteAddr.(localAddr)
	return ok
}

func (t trusted) Authenticate(ctx context.Context, req broker.ConnectRequest) packet.ReasonCode {
	if isBridge(req.ClientInfo) {
		return packet.Success
	}
	return t.Authenticator.Authenticate(ctx, req)
}

func (t trusted) CanPublish(c broker.ClientInfo, topic string) bool {
	return isBridge(c) || t.Authenticator.CanPublish(c, topic)
}

func (t trusted) CanSubscribe(c broker.ClientInfo, filter string) bool {
	return isBridge(c) || t.Authenticator.CanSubscribe(c, filter)
}
