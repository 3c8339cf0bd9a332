package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/linemq/linemq/broker/topic"
	"github.com/linemq/linemq/gateway/bridge"
)

// ValidateBridges checks the bridges section, naming each key and, for a
// file, its line. Validate calls it.
func (c *Config) ValidateBridges() error {
	v := validator{src: c.src}
	names := make(map[string]int)
	for i, b := range c.Bridges {
		key := fmt.Sprintf("bridges[%d]", i)
		switch {
		case b.Name == "":
			v.fail(key+".name", errors.New("required"))
		case strings.IndexFunc(b.Name, func(r rune) bool {
			return !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}) >= 0:
			v.fail(key+".name", fmt.Errorf("%q: letters, digits, - and _ only", b.Name))
		default:
			if j, dup := names[b.Name]; dup {
				v.fail(key+".name", fmt.Errorf("%q repeats bridges[%d]", b.Name, j))
			}
			names[b.Name] = i
		}
		if len(b.Addresses) == 0 {
			v.fail(key+".addresses", errors.New("required: at least one host:port"))
		}
		for j, a := range b.Addresses {
			host := a
			for _, s := range []string{"mqtt://", "tcp://", "tls://", "mqtts://", "ssl://"} {
				host = strings.TrimPrefix(host, s)
			}
			if strings.Contains(host, "://") {
				v.fail(fmt.Sprintf("%s.addresses[%d]", key, j), fmt.Errorf("%q: scheme must be mqtt:// or tls://", a))
				continue
			}
			v.addr(fmt.Sprintf("%s.addresses[%d]", key, j), host)
		}
		if b.Protocol != 0 && b.Protocol != 5 && b.Protocol != 311 {
			v.fail(key+".protocol", fmt.Errorf("%d: 5 or 311", b.Protocol))
		}
		if t := &b.TLS; t.Set() && (t.CertFile == "") != (t.KeyFile == "") {
			v.fail(key+".tls", errors.New("cert_file and key_file go together"))
		}
		v.seconds(key+".keepalive", b.KeepAlive, bridge.DefaultKeepAlive, maxUint16*Duration(time.Second))
		if b.KeepAlive < 0 {
			v.fail(key+".keepalive", errors.New("cannot be unlimited"))
		}
		v.seconds(key+".session_expiry", b.SessionExpiry, bridge.DefaultSessionExpiry, maxSessionExpiry)
		limit(&v, key+".reconnect_delay", b.ReconnectDelay, bridge.DefaultReconnectDelay, bounds[Duration]{Duration(100 * time.Millisecond), 0, false})
		limit(&v, key+".drain_rate", b.DrainRate, bridge.DefaultDrainRate, bounds[Limit]{1, 0, true})
		limit(&v, key+".max_inflight", b.MaxInflight, bridge.DefaultMaxInflight, bounds[Limit]{1, maxUint16, false})
		limit(&v, key+".queue.max_bytes", b.Queue.MaxBytes, bridge.DefaultQueueMaxBytes, bounds[Size]{1024, 0, false})
		limit(&v, key+".queue.max_age", b.Queue.MaxAge, bridge.DefaultQueueMaxAge, bounds[Duration]{Duration(time.Second), 0, true})
		if len(b.Out) == 0 && len(b.In) == 0 {
			v.fail(key, errors.New("no out or in rules: the bridge would forward nothing"))
		}
		for dir, rs := range map[string][]bridge.Rule{"out": b.Out, "in": b.In} {
			for j, r := range rs {
				rk := fmt.Sprintf("%s.%s[%d]", key, dir, j)
				if err := topic.ValidateFilter([]byte(r.Filter)); err != nil || strings.HasPrefix(r.Filter, "$share/") {
					v.fail(rk+".filter", fmt.Errorf("%q is not a topic filter", r.Filter))
				}
				if strings.ContainsAny(r.Prefix+r.Strip, "+#") {
					v.fail(rk+".prefix", errors.New("prefix and strip cannot hold wildcards"))
				}
				if r.QoS != nil && (*r.QoS < 0 || *r.QoS > 1) {
					v.fail(rk+".qos", fmt.Errorf("%d: 0 or 1", *r.QoS))
				}
			}
		}
		// 3.1.1 has no No Local: a remote topic both sent to and subscribed
		// to would come straight back. Refuse the overlap (docs/bridge.md).
		if b.Protocol == 311 {
			for j, in := range b.In {
				for k, out := range b.Out {
					if filtersOverlap(in.Filter, out.Prefix+strings.TrimPrefix(out.Filter, out.Strip)) {
						v.fail(fmt.Sprintf("%s.in[%d].filter", key, j), fmt.Errorf("%q may match topics out[%d] sends to the remote; with protocol 311 (no No Local) they would loop: make them disjoint, or use protocol 5", in.Filter, k))
					}
				}
			}
		}
	}
	return errors.Join(v.errs...)
}

// filtersOverlap reports whether some topic may match both filters.
func filtersOverlap(a, b string) bool {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; ; i++ {
		switch {
		case i < len(as) && as[i] == "#", i < len(bs) && bs[i] == "#":
			return true
		case i == len(as) || i == len(bs):
			return len(as) == len(bs)
		case as[i] != "+" && bs[i] != "+" && as[i] != bs[i]:
			return false
		}
	}
}
