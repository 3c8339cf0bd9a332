// Package listen opens the sockets MQTT clients connect to: plain TCP,
// TLS, MQTT over WebSocket and over secure WebSocket, each a net.Listener
// with its own connection limit. It knows nothing of MQTT: the broker
// reads MQTT bytes from whatever Accept returns (give each [Listener] to
// broker.Server.Serve).
//
// # Model
//
// A [Listener] accepts TCP connections and counts them against its
// MaxConnections; one beyond the limit is closed as soon as it is accepted,
// before any handshake, so a flood costs an accept and a close each. TLS
// handshakes and WebSocket upgrades then run in goroutines of the listener
// under a timeout, and only connections that complete them reach Accept:
// a client that connects and says nothing holds its place for
// Options.HandshakeTimeout at most, and never delays the next client.
//
// TLS is 1.2 or later. The certificate, key, CA and CRL are read at Listen
// and again at [Listener.Reload], which the listener calls by itself once
// their files have changed and settled (gateway/certs.Watcher, within half
// a second) and the gateway on SIGHUP: new handshakes use the new files,
// established connections are untouched, and files that do not load leave
// the old ones in force. With ca_file, client certificates are verified
// (and required with require_client_cert); a verified certificate's name
// becomes the client's identity. With crl_file, a certificate its issuer
// revoked is refused at the handshake, and a connection already open with
// one is closed when the list that revokes it is loaded: revoking is how
// an operator says a device must stop talking now, not at its next
// reconnect. The broker sees such a close as a lost connection (the will
// is published; a persistent session stays).
//
// # Identities
//
// broker.ClientInfo carries only the connection's RemoteAddr, so the
// identity travels in it: a connection whose client presented a verified
// certificate returns a [*PeerAddr] from RemoteAddr, whose Identity method
// gateway/auth uses as the user name (and whose String is the plain
// address, for logs). The connection itself has the same Identity method.
//
// # WebSocket
//
// A ws or wss listener serves HTTP on its address and upgrades requests
// on its path that offer the subprotocol "mqtt" (or the old "mqttv3.1");
// binary messages carry the MQTT byte stream in both directions, with no
// relation between message and packet boundaries. Compression is off, the
// Origin of browsers is checked (same origin, or Config.Origins), and the
// remote address is the TCP peer's: X-Forwarded-For is not believed, so a
// reverse proxy on the gateway makes every client look local (see
// docs/security.md).
//
// # Caveats
//
// Connections from a tcp listener keep SyscallConn, so the broker can park
// them idle; TLS and WebSocket connections do not (TLS may hold decrypted
// bytes the descriptor does not show). A WebSocket connection's reads run
// in a goroutine of its own, which reads at most 16 KiB ahead.
package listen
