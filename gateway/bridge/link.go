package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// link is the remote side of a bridge, one implementation per protocol
// version (link5.go, link311.go). A link connects in the background,
// failing over between the addresses and reconnecting with backoff, and
// tells the bridge: linkUp once connected (the in rules subscribed or on
// their way), linkDown when the connection is lost, fail on a failed
// attempt, and fromRemote for each message the in rules bring, which it
// acknowledges to the remote only after fromRemote returns.
type link interface {
	// publish sends m and, at QoS 1, waits for the remote's PUBACK. A
	// refusal returns its reason code (MQTT 5 only) with the error; a
	// lost link, an error and reason code 0.
	publish(ctx context.Context, m *message) (reason byte, err error)
	// disconnect ends the connection and stops reconnecting; ctx bounds
	// the goodbye.
	disconnect(ctx context.Context)
	// done is closed once the link's goroutines have finished.
	done() <-chan struct{}
}

var errLinkDown = errors.New("bridge: the link to the remote is down")

// remoteURLs returns the bridge's addresses as URLs: a bare host:port gets
// mqtt://, or tls:// when the bridge has TLS; mqtts:// and ssl:// are
// tls://.
func (b *Bridge) remoteURLs() ([]*url.URL, error) {
	var urls []*url.URL
	for _, a := range b.cfg.Addresses {
		s := a
		if !strings.Contains(s, "://") {
			if b.tlsCfg != nil {
				s = "tls://" + s
			} else {
				s = "mqtt://" + s
			}
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", a, err)
		}
		if u.Scheme == "mqtts" || u.Scheme == "ssl" {
			u.Scheme = "tls"
		}
		urls = append(urls, u)
	}
	return urls, nil
}

// reconnectDelays returns the first and the longest wait between
// connection attempts: a quarter second (less if reconnect_delay is
// shorter), doubling up to reconnect_delay.
func (b *Bridge) reconnectDelays() (first, longest time.Duration) {
	longest = time.Duration(b.cfg.ReconnectDelay)
	return min(250*time.Millisecond, longest/2), longest
}
