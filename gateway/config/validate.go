package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/gateway/listen"
	"github.com/linemq/linemq/hw"
)

// Limits of the MQTT protocol that Validate enforces.
const (
	// maxPacketSize is the largest packet MQTT can frame: one byte of
	// type and flags, four of Remaining Length, and the most those can
	// count (v5 section 2.1.4).
	maxPacketSize = 1 + 4 + packet.MaxRemainingLength
	// maxUint16 bounds two-byte integers: receive maximum, topic aliases,
	// keep alive, and the length prefix of strings (client id, topic).
	maxUint16 = 65535
	// maxSessionExpiry is the largest four-byte Session Expiry Interval.
	maxSessionExpiry = Duration(4_294_967_295 * time.Second)
)

// Validate reports every value that is out of range or inconsistent with
// another: it does not stop at the first, but joins them all with
// errors.Join, each an [*Error] naming its key path and, when the value
// came from a file or an override, where. Unset (zero) fields stand for
// their defaults, which are valid; a 0 written in a file or a flag for a
// limit is an error (see the package documentation). As a last line of
// defence it also runs broker.Options.Validate on [Config.BrokerOptions],
// so a Config that passes is one broker.New accepts.
func (c *Config) Validate() error {
	e := c.WithDefaults()
	d := Default()
	v := validator{src: c.src}

	if strings.ContainsFunc(e.NodeID, func(r rune) bool { return r == '/' || unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		// It becomes part of etcd keys (nodes/<node-id>) in a cluster.
		v.fail("node_id", fmt.Errorf("%q must not contain \"/\", spaces or control characters", e.NodeID))
	}
	v.check("log_level", c.LogLevel.check())
	v.check("log_format", c.LogFormat.check())

	// Limits are checked on c, not e: an explicit 0 must not be mistaken
	// for the default it would become.
	m, dm := &c.MQTT, &d.MQTT
	v.addr("mqtt.listen", *e.MQTT.Listen)
	limit(&v, "mqtt.max_packet_size", m.MaxPacketSize, dm.MaxPacketSize, bounds[Size]{1, maxPacketSize, false})
	limit(&v, "mqtt.receive_maximum", m.ReceiveMaximum, dm.ReceiveMaximum, bounds[Limit]{1, maxUint16, false})
	if m.TopicAliasMaximum != nil {
		limit(&v, "mqtt.topic_alias_maximum", *m.TopicAliasMaximum, *dm.TopicAliasMaximum, bounds[Limit]{0, maxUint16, false})
	}
	v.seconds("mqtt.max_keepalive", m.MaxKeepAlive, dm.MaxKeepAlive, Duration(maxUint16*time.Second))
	v.seconds("mqtt.max_session_expiry", m.MaxSessionExpiry, dm.MaxSessionExpiry, maxSessionExpiry)
	limit(&v, "mqtt.max_queued_messages", m.MaxQueuedMessages, dm.MaxQueuedMessages, bounds[Limit]{1, 0, false})
	limit(&v, "mqtt.max_queued_total", m.MaxQueuedTotal, dm.MaxQueuedTotal, bounds[Limit]{1, 0, true})
	limit(&v, "mqtt.max_pending_bytes", m.MaxPendingBytes, dm.MaxPendingBytes, bounds[Size]{1, 0, false})
	limit(&v, "mqtt.max_pending_bytes_total", m.MaxPendingBytesTotal, dm.MaxPendingBytesTotal, bounds[Size]{1, 0, true})
	limit(&v, "mqtt.max_client_id_length", m.MaxClientIDLength, dm.MaxClientIDLength, bounds[Limit]{1, maxUint16, false})
	limit(&v, "mqtt.max_topic_levels", m.MaxTopicLevels, dm.MaxTopicLevels, bounds[Limit]{1, maxUint16, true})
	limit(&v, "mqtt.max_topic_length", m.MaxTopicLength, dm.MaxTopicLength, bounds[Limit]{1, maxUint16, true})
	limit(&v, "mqtt.partial_packet_timeout", m.PartialPacketTimeout, dm.PartialPacketTimeout, bounds[Duration]{minTimeout, 0, true})
	limit(&v, "mqtt.connect_timeout", m.ConnectTimeout, dm.ConnectTimeout, bounds[Duration]{minTimeout, 0, false})
	limit(&v, "mqtt.max_connect_size", m.MaxConnectSize, dm.MaxConnectSize, bounds[Size]{1024, 0, false})
	if em := &e.MQTT; em.MaxConnectSize > em.MaxPacketSize && v.src.has("mqtt.max_connect_size") {
		v.fail("mqtt.max_connect_size", fmt.Errorf("%v is larger than mqtt.max_packet_size (%v)", em.MaxConnectSize, em.MaxPacketSize))
	}
	limit(&v, "mqtt.max_connecting_bytes", m.MaxConnectingBytes, dm.MaxConnectingBytes, bounds[Size]{MiB, 0, false})
	limit(&v, "mqtt.write_timeout", m.WriteTimeout, dm.WriteTimeout, bounds[Duration]{minTimeout, 0, false})

	limit(&v, "mqtt.max_connections", m.MaxConnections, dm.MaxConnections, bounds[Limit]{1, 0, true})
	limit(&v, "mqtt.max_publish_rate", m.MaxPublishRate, dm.MaxPublishRate, bounds[Limit]{1, 0, true})
	v.burst(m.PublishBurst, e.MQTT.MaxPublishRate)
	limit(&v, "mqtt.max_subscriptions_per_client", m.MaxSubscriptionsPerClient, dm.MaxSubscriptionsPerClient, bounds[Limit]{1, 0, true})
	limit(&v, "mqtt.max_subscription_bytes", m.MaxSubscriptionBytes, dm.MaxSubscriptionBytes, bounds[Size]{4096, 0, true})
	limit(&v, "mqtt.max_retained_messages", m.MaxRetainedMessages, dm.MaxRetainedMessages, bounds[Limit]{1, 0, true})
	limit(&v, "mqtt.max_retained_bytes", m.MaxRetainedBytes, dm.MaxRetainedBytes, bounds[Size]{1, 0, true})
	limit(&v, "mqtt.max_sessions", m.MaxSessions, dm.MaxSessions, bounds[Limit]{1, 0, true})

	v.check("mqtt.overload", m.Overload.check())
	if m.SysInterval != nil && *m.SysInterval != 0 {
		// 0 turns $SYS off, as in Mosquitto.
		limit(&v, "mqtt.sys_interval", *m.SysInterval, *dm.SysInterval, bounds[Duration]{Duration(time.Second), 0, false})
	}

	v.addr("http.listen", *e.HTTP.Listen)
	v.httpLogin(c)

	h, dh := &c.Health, &d.Health
	limit(&v, "health.probe_interval", h.ProbeInterval, dh.ProbeInterval, bounds[Duration]{Duration(100 * time.Millisecond), 0, false})
	limit(&v, "health.probe_timeout", h.ProbeTimeout, dh.ProbeTimeout, bounds[Duration]{minTimeout, 0, false})
	if eh := &e.Health; eh.ProbeTimeout > eh.ProbeInterval {
		v.fail("health.probe_timeout", fmt.Errorf("%v is longer than health.probe_interval (%v)", eh.ProbeTimeout, eh.ProbeInterval))
	}

	// A trial shorter than a few health probes proves nothing; longer than
	// a day leaves a line on an uncommitted version.
	limit(&v, "update.trial", c.Update.Trial, d.Update.Trial, bounds[Duration]{Duration(time.Second), Duration(24 * time.Hour), false})

	v.cluster(&e.Cluster)
	if e.Cluster.Listen != "" {
		v.clusterTLS(&e.Cluster, e.NodeID)
	}

	for _, err := range unjoin(c.Listeners.Validate()) {
		var le *listen.Error
		if errors.As(err, &le) {
			v.fail(le.Key, le.Err) // already a full key: listeners[1].cert_file
		} else {
			v.fail("listeners", err)
		}
	}
	for _, err := range unjoin(c.Auth.Validate()) {
		var ae *auth.Error
		if errors.As(err, &ae) {
			v.fail("auth."+ae.Key, ae.Err)
		} else {
			v.fail("auth", err)
		}
	}

	for _, err := range unjoin(c.HW.Validate()) {
		var he *hw.Error
		if errors.As(err, &he) {
			v.fail("hw."+he.Key, he.Err)
		} else {
			v.fail("hw", err)
		}
	}

	s := &c.SharedSubscriptions
	v.check("shared_subscriptions.strategy", s.Strategy.check())
	v.check("shared_subscriptions.overload", s.Overload.check())
	first := make(map[string]int) // group name pattern -> index of its first entry
	for i, g := range s.Groups {
		key := fmt.Sprintf("shared_subscriptions.groups[%d]", i)
		v.shareName(key+".name", g.Name)
		if j, dup := first[g.Name]; dup && g.Name != "" {
			v.fail(key+".name", fmt.Errorf("%q repeats groups[%d]; only the first entry that matches applies", g.Name, j))
		} else {
			first[g.Name] = i
		}
		v.check(key+".strategy", g.Strategy.check())
		v.check(key+".overload", g.Overload.check())
		for j, p := range g.AllowedClients {
			v.pattern(fmt.Sprintf("%s.allowed_clients[%d]", key, j), p)
		}
		if g.MinMembers < 0 {
			v.fail(key+".min_members", fmt.Errorf("must not be negative (got %d)", g.MinMembers))
		}
		limit(&v, key+".max_members", g.MaxMembers, Unlimited, bounds[Limit]{1, 0, true})
		if g.MaxMembers > 0 && g.MinMembers > int(g.MaxMembers) {
			v.fail(key+".min_members", fmt.Errorf("%d exceeds max_members (%d)", g.MinMembers, g.MaxMembers))
		}
	}

	limit(&v, "sparkplug.max_edge_nodes", c.Sparkplug.MaxEdgeNodes, d.Sparkplug.MaxEdgeNodes, bounds[Limit]{1, 1_000_000, false})
	if n := c.Sparkplug.MetricsEdgeNodes; n != nil {
		limit(&v, "sparkplug.metrics_edge_nodes", *n, *d.Sparkplug.MetricsEdgeNodes, bounds[Limit]{0, 10_000, false})
	}
	v.check("storage.sync", c.Storage.Sync.check())
	limit(&v, "storage.batch_interval", c.Storage.BatchInterval, d.Storage.BatchInterval, bounds[Duration]{minTimeout, 0, false})
	limit(&v, "storage.max_size", c.Storage.MaxSize, d.Storage.MaxSize, bounds[Size]{2 << 20, 0, true})

	if len(v.errs) == 0 {
		bo := c.BrokerOptions()
		if err := bo.Validate(); err != nil {
			// A rule of the broker's that the checks above do not know.
			v.errs = append(v.errs, &Error{Err: err})
		}
	}
	return errors.Join(append(v.errs, c.ValidateBridges())...) // bridge.go
}

// minTimeout is the shortest time limit accepted: anything shorter is a
// typo for a longer one, or an attempt at "no limit".
const minTimeout = Duration(time.Millisecond)

// validator collects errors located through src.
type validator struct {
	src  *source
	errs []error
}

func (v *validator) fail(key string, err error) {
	p, _ := v.src.lookup(key)
	v.errs = append(v.errs, &Error{File: p.file, Line: p.line, Key: key, Err: err})
}

// check records err, if any, against key.
func (v *validator) check(key string, err error) {
	if err != nil {
		v.fail(key, err)
	}
}

// bounds are the values a limit key accepts: lo..hi (hi 0: no upper
// bound), and Unlimited when unlimited is set.
type bounds[T Limit | Size | Duration] struct {
	lo, hi    T
	unlimited bool
}

// String describes the accepted values: "1..65535", "1ms or more",
// "1..65535 or unlimited".
func (b bounds[T]) String() string {
	var s string
	if b.hi > 0 {
		s = showBound(b.lo) + ".." + showBound(b.hi)
	} else {
		s = showBound(b.lo) + " or more"
	}
	if b.unlimited {
		s += ", or unlimited"
	}
	return s
}

// showBound formats a bound; a duration of whole minutes or more in
// seconds, as the protocol counts them ("65535s", not "18h12m15s").
func showBound[T Limit | Size | Duration](x T) string {
	if d, ok := any(x).(Duration); ok && d >= Duration(time.Minute) && d%Duration(time.Second) == 0 {
		return strconv.FormatInt(int64(d/Duration(time.Second)), 10) + "s"
	}
	return fmt.Sprint(x)
}

// limit checks the limit at key, whose default is def, against b. A zero
// value stands for the default, unless it was written in a file or given
// as a flag: then it is an error, as 0 would be ambiguous (the default? no
// limit?). A negative value is Unlimited.
func limit[T Limit | Size | Duration](v *validator, key string, n, def T, b bounds[T]) {
	switch {
	case n == 0 && b.lo > 0:
		if v.src.has(key) {
			hint := fmt.Sprintf("leave the key out for the default (%v)", def)
			switch {
			case def < 0:
				hint = "leave the key out, or write unlimited, for no limit"
			case b.unlimited:
				hint += ", or write unlimited for no limit"
			}
			v.fail(key, fmt.Errorf("0 is not allowed (%v); %s", b, hint))
		}
	case n < 0:
		if !b.unlimited {
			v.fail(key, fmt.Errorf("cannot be unlimited (%v)", b))
		}
	case n < b.lo || b.hi > 0 && n > b.hi:
		v.fail(key, fmt.Errorf("%v out of range (%v)", n, b))
	}
}

// seconds checks a cap the protocol carries in whole seconds, default
// Unlimited: the broker would round 1500ms down to 1s, and 500ms to 0,
// which it takes for "no cap".
func (v *validator) seconds(key string, d, def, hi Duration) {
	limit(v, key, d, def, bounds[Duration]{Duration(time.Second), hi, true})
	if d > 0 && d%Duration(time.Second) != 0 {
		v.fail(key, fmt.Errorf("%v is not a whole number of seconds", d))
	}
}

// burst checks mqtt.publish_burst, whose default is the rate: 1 or more,
// and only with a rate to apply it to.
func (v *validator) burst(b, rate Limit) {
	const key = "mqtt.publish_burst"
	switch {
	case b == 0 && v.src.has(key):
		v.fail(key, errors.New("0 is not allowed (1 or more); leave the key out for the default (mqtt.max_publish_rate, one second's worth)"))
	case b < 0:
		v.fail(key, errors.New("cannot be unlimited (1 or more): write unlimited in mqtt.max_publish_rate for no rate limit"))
	case b > 0 && rate < 0:
		v.fail(key, errors.New("has no effect while mqtt.max_publish_rate is unlimited: set the rate too, or leave this key out"))
	}
}

// addr checks a listen address; empty disables the listener.
func (v *validator) addr(key, a string) {
	if a == "" {
		return
	}
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		msg := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			msg = ae.Err
		}
		v.fail(key, fmt.Errorf("invalid address %q: %s (write it as host:port, or :port for all interfaces)", a, msg))
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		v.fail(key, fmt.Errorf("invalid port %q in %q (need 0..65535)", port, a))
	}
}

// cluster checks the cluster section: it is on when listen is set, and then
// needs an etcd, external or embedded.
func (v *validator) cluster(c *Cluster) {
	if c.Listen == "" {
		if c.Etcd.Embed || len(c.Etcd.Endpoints) > 0 {
			v.fail("cluster.listen", errors.New("not set, so the etcd settings have no effect: set it to this node's host:port for the node-to-node transport"))
		}
		return
	}
	if strings.ContainsAny(c.Name, "/ ") || c.Name == "" {
		v.fail("cluster.name", fmt.Errorf("%q must be non-empty, without \"/\" or spaces", c.Name))
	}
	v.addr("cluster.listen", c.Listen)
	adv, key := c.Advertise, "cluster.advertise"
	if adv == "" {
		adv, key = c.Listen, "cluster.listen"
	}
	if host, _, err := net.SplitHostPort(adv); err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			v.fail(key, fmt.Errorf("%q names no host other nodes can dial: set cluster.advertise", adv))
		}
	} else if key == "cluster.advertise" {
		v.addr(key, adv)
	}
	e := &c.Etcd
	switch {
	case e.Embed && len(e.Endpoints) > 0:
		v.fail("cluster.etcd", errors.New("both embed and endpoints: choose one"))
	case !e.Embed && len(e.Endpoints) == 0:
		v.fail("cluster.etcd", errors.New("no etcd: set endpoints, or embed: true to run a member in this gateway"))
	case e.Embed:
		if st := e.InitialClusterState; st != "" && st != "new" && st != "existing" {
			v.fail("cluster.etcd.initial_cluster_state", fmt.Errorf("%q is neither \"new\" nor \"existing\"", st))
		}
		for _, u := range []struct{ key, url string }{{"cluster.etcd.peer_listen", e.PeerListen}, {"cluster.etcd.client_listen", e.ClientListen}} {
			if u.url == "" {
				v.fail(u.key, errors.New("required with embed: true (a URL such as http://10.0.0.11:2380)"))
			} else if _, err := url.Parse(u.url); err != nil || !strings.Contains(u.url, "://") {
				v.fail(u.key, fmt.Errorf("%q is not a URL", u.url))
			}
		}
	}
	if r := c.Replicas; r != nil && (*r < 0 || *r > MaxReplicas) {
		v.fail("cluster.replicas", fmt.Errorf("%d is not between 0 (no copies) and %d", *r, MaxReplicas))
	}
	limit(v, "cluster.forwards.max_bytes", c.Forwards.MaxBytes, DefaultForwardMaxBytes, bounds[Size]{1024, 0, false})
	limit(v, "cluster.forwards.max_age", c.Forwards.MaxAge, DefaultForwardMaxAge, bounds[Duration]{Duration(time.Second), 0, false})
	seen := map[string]bool{}
	for i, n := range c.ExpectedNodes {
		key := fmt.Sprintf("cluster.expected_nodes[%d]", i)
		switch {
		case n == "" || strings.ContainsAny(n, "/ "):
			v.fail(key, fmt.Errorf("%q is not a node name (non-empty, without \"/\" or spaces)", n))
		case seen[n]:
			v.fail(key, fmt.Errorf("%q is listed twice", n))
		}
		seen[n] = true
	}
	for i, ep := range e.Endpoints {
		if !strings.Contains(ep, "://") {
			v.fail(fmt.Sprintf("cluster.etcd.endpoints[%d]", i), fmt.Errorf("%q is not a URL (http://host:2379)", ep))
		}
	}
}

// httpLogin checks http.login, http.users and update.admins: a login needs
// a password file to check against, and the lists of users need a login.
func (v *validator) httpLogin(c *Config) {
	h := &c.HTTP
	v.check("http.login", h.Login.check())
	if h.Login == HTTPLoginRequired && c.Auth.PasswordFile == "" {
		v.fail("http.login", errors.New("required needs auth.password_file: the login checks its users and passwords"))
	}
	if len(h.Users) > 0 && !c.HTTPLoginRequired() {
		v.fail("http.users", errors.New("has no effect without a login (auth.password_file, and http.login not off)"))
	}
	first := make(map[string]int)
	for i, u := range h.Users {
		key := fmt.Sprintf("http.users[%d]", i)
		if err := auth.CheckUsername(u); err != nil {
			v.fail(key, err)
		} else if j, dup := first[u]; dup {
			v.fail(key, fmt.Errorf("%q repeats http.users[%d]", u, j))
		} else {
			first[u] = i
		}
	}
	admins := make(map[string]int)
	for i, u := range c.Update.Admins {
		key := fmt.Sprintf("update.admins[%d]", i)
		if i == 0 && !c.HTTPLoginRequired() {
			v.fail("update.admins", errors.New("needs the HTTP login (auth.password_file, and http.login not off): an upload must come from a known user"))
		}
		_, user := first[u]
		switch err := auth.CheckUsername(u); {
		case err != nil:
			v.fail(key, err)
		case admins[u] > 0:
			v.fail(key, fmt.Errorf("%q repeats update.admins[%d]", u, admins[u]-1))
		case len(h.Users) > 0 && !user:
			v.fail(key, fmt.Errorf("%q is not one of http.users, so could not log in to upload", u))
		default:
			admins[u] = i + 1
		}
	}
}

// shareName checks a group name pattern: a valid glob that could match a
// share name, which cannot contain /, + or # [MQTT-4.8.2-2].
func (v *validator) shareName(key, name string) {
	switch {
	case name == "":
		v.fail(key, errors.New("required"))
	case strings.ContainsAny(name, "/+#"):
		v.fail(key, fmt.Errorf("%q can never match: share names cannot contain \"/\", \"+\" or \"#\"", name))
	default:
		v.pattern(key, name)
	}
}

func (v *validator) pattern(key, p string) {
	if p == "" {
		v.fail(key, errors.New("empty pattern"))
		return
	}
	if _, err := path.Match(p, ""); err != nil {
		v.fail(key, fmt.Errorf("bad pattern %q: %w", p, err))
	}
}

// unjoin returns the errors joined in err (errors.Join), or err alone.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
