package peer

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// condition is what PeerStats.Problem is worded from: a link's state at
// one moment.
type condition struct {
	node, addr string
	dial       bool          // this node dials the peer
	connected  bool          // a stream is up
	ready      bool          // ... and has answered a ping
	breaker    BreakerState  //
	cause      uint32        // why the breaker last opened (causeBroken, ...)
	silent     time.Duration // since the last pong, or since the stream came up
	threshold  int           // Options.FailureThreshold
	last       error         // why the last stream ended or the last dial failed
}

// describe words the condition for an operator: empty when the peer can
// take traffic, otherwise what is wrong and, where it helps, what to
// check. The raw error stays in PeerStats.LastError.
func (c condition) describe() string {
	if c.connected {
		switch {
		case c.breaker == BreakerClosed && c.ready:
			return ""
		case c.breaker == BreakerClosed:
			return "connected, waiting for the first answer to a ping"
		}
		switch c.cause {
		case causePing:
			return fmt.Sprintf("no answer to pings for %s (frozen or cut off)", seconds(c.silent))
		case causeTimeouts:
			return fmt.Sprintf("breaker open after %d delivery timeouts in a row (it answers pings but not deliveries)", c.threshold)
		}
		return "reconnected after the connection was lost, waiting for an answer to a ping"
	}
	if c.last == nil {
		if c.dial {
			return "no connection yet"
		}
		return "no connection yet (waiting for " + c.node + " to connect to this node)"
	}
	if errors.Is(c.last, ErrClosed) {
		return "this node is shutting down"
	}
	raw := c.last.Error()
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(raw, s) {
				return true
			}
		}
		return false
	}
	at := c.addr
	if at == "" {
		at = "its address"
	}
	switch {
	// What the other node said when it refused the stream.
	case has("is not a peer of"):
		return "the other node does not know this node yet (its registry has not caught up, or this node is not registered)"
	case has("is of cluster"):
		return "it belongs to another cluster"
	case has("answered as node"):
		return "another node answers at " + at + " (a stale address?)"
	case has("not the other way round"):
		return "both nodes wait for the other to connect (do they agree on the node names?)"
	// TLS: theirs of ours (the acceptor checks the name after the
	// handshake, so its refusal comes as text), then ours of theirs.
	case has("does not name node", "no client certificate"):
		return "it does not accept this node's certificate (it must name this node)"
	case has("certificate signed by unknown authority"):
		return "its certificate is not trusted (signed by an unknown authority)"
	case has("certificate is valid for", "certificate is not valid for any names"):
		return "its certificate does not name " + c.node
	case has("certificate has expired or is not yet valid"):
		return "its certificate has expired or is not yet valid"
	case has("remote error: tls:", "does not name node"):
		return "it does not accept this node's certificate"
	case has("first record does not look like a TLS handshake", "tls: "):
		return "TLS failed (is TLS configured on both nodes?)"
	case has("error reading server preface"):
		return "it hung up during the handshake (TLS configured on one of the two nodes only?)"
	// The network.
	case has("connection refused"):
		return "connection refused at " + at + " (is linemq running there?)"
	case has("no such host"):
		return "cannot resolve " + at
	case has("no route to host", "network is unreachable", "host is unreachable"):
		return "no route to " + at + " (network down or cable pulled?)"
	case has("i/o timeout", "context deadline exceeded", "DeadlineExceeded"):
		return "no answer from " + at + " (host down, wrong address or a firewall?)"
	}
	if !errors.Is(c.last, ErrBroken) {
		return "cannot connect: " + raw
	}
	switch {
	case has("address changed"):
		return "reconnecting: it registered a new address"
	case has("replaced by a new stream"):
		return "reconnecting: it opened a new connection"
	case has("malformed"):
		return "it sent frames this node cannot read (linemq versions too far apart?)"
	}
	if c.dial {
		return "connection lost (the other node stopped, restarted or was cut off); reconnecting"
	}
	return "connection lost (the other node stopped, restarted or was cut off); waiting for it to reconnect"
}

// seconds formats d as "1.5 s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(math.Round(d.Seconds()*10)/10, 'f', -1, 64) + " s"
}
