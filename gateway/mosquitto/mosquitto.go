// Package mosquitto reads a Mosquitto broker's configuration file and
// writes the linemq configuration that does the same, with a note for
// every directive it could not carry over and why (`linemq
// import-mosquitto`). The password and ACL files are Mosquitto's own
// format in linemq too: the output names them where they are.
package mosquitto

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Note is a directive the import could not carry over as it was, and why.
type Note struct {
	File      string
	Line      int
	Directive string
	Why       string
}

func (n Note) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", n.File, n.Line, n.Directive, n.Why)
}

// Result is an imported configuration.
type Result struct {
	// YAML is the linemq configuration, ready to be written to
	// linemq.yaml.
	YAML []byte
	// Notes are the directives not carried over, in the order of the
	// files.
	Notes []Note
}

// Import reads the Mosquitto configuration at path (and the files its
// include_dir directives name) and returns its linemq equivalent. It fails
// only on a file it cannot read or a line Mosquitto would refuse too
// (a directive without its value).
func Import(path string) (*Result, error) {
	im := &importer{}
	if err := im.file(path); err != nil {
		return nil, err
	}
	im.finish()
	out, err := im.render()
	if err != nil {
		return nil, err
	}
	// In the order of the files as read, and of the lines in each.
	slices.SortStableFunc(im.notes, func(a, b Note) int {
		if c := cmp.Compare(slices.Index(im.files, a.File), slices.Index(im.files, b.File)); c != 0 {
			return c
		}
		return cmp.Compare(a.Line, b.Line)
	})
	return &Result{YAML: out, Notes: im.notes}, nil
}

// importer holds what the directives read so far say.
type importer struct {
	files []string // in the order read
	notes []Note
	at    Note // the directive being read: its file, line and name

	perListener bool
	auth        authSettings // global, or the default listener's with per_listener_settings
	defaults    *listener    // port / bind_address: Mosquitto's default listener
	listeners   []*listener
	bridges     []*bridge

	maxQueued      any // a count, or "unlimited"
	maxPacket      int64
	messageLimit   int64
	maxKeepAlive   string
	sysInterval    string
	queueQoS0      *bool
	retainAvail    *bool
	maxConnections any // outside any listener: the default listener's
	logLevel       string
}

type authSettings struct {
	allowAnonymous *bool
	passwordFile   string
	aclFile        string
	where          Note // the first of them, for notes
}

type listener struct {
	port, bind         string
	websockets         bool
	certFile, keyFile  string
	caFile             string
	requireCert        bool
	maxConnections     any
	auth               authSettings
	from               Note
	identityAsUsername *bool
}

type bridge struct {
	name                  string
	addresses             []string
	clientID              string
	username, password    string
	caFile, certFile, key string
	protocol              int
	keepAlive             string
	out, in               []rule
	from                  Note
	tlsWanted             bool // a bridge_* TLS file was given
	both                  bool // a topic goes both ways
}

type rule struct {
	Filter string `yaml:"filter"`
	Strip  string `yaml:"strip,omitempty"`
	Prefix string `yaml:"prefix,omitempty"`
	QoS    *int   `yaml:"qos,omitempty"`
}

// note records the directive being read as not carried over.
func (im *importer) note(why string, args ...any) {
	n := im.at
	n.Why = fmt.Sprintf(why, args...)
	im.notes = append(im.notes, n)
}

// file reads one configuration file.
func (im *importer) file(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	im.files = append(im.files, path)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue // Mosquitto's comments take whole lines
		}
		fields := strings.Fields(text)
		im.at = Note{File: path, Line: line, Directive: fields[0]}
		if err := im.directive(fields[0], fields[1:], text); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", path, line, fields[0], err)
		}
	}
	return sc.Err()
}

// errNoValue is a directive given without the value it needs.
var errNoValue = errors.New("a value is needed")

// pathDirectives take the rest of their line as the value, spaces
// included, as Mosquitto reads them.
var pathDirectives = []string{"include_dir", "certfile", "keyfile", "cafile", "password_file", "acl_file",
	"bridge_cafile", "bridge_certfile", "bridge_keyfile"}

// directive applies one line.
func (im *importer) directive(name string, args []string, text string) error {
	arg := ""
	if len(args) > 0 {
		arg = args[0]
	}
	if slices.Contains(pathDirectives, name) && len(args) > 0 {
		arg = strings.TrimSpace(strings.TrimPrefix(text, name))
		args = []string{arg}
	}
	need := func() error {
		if len(args) == 0 {
			return errNoValue
		}
		return nil
	}
	if strings.HasPrefix(name, "bridge_") || slices.Contains(bridgeDirectives, name) {
		return im.bridgeDirective(name, args, text)
	}
	switch name {
	case "include_dir":
		if err := need(); err != nil {
			return err
		}
		files, err := filepath.Glob(filepath.Join(arg, "*.conf"))
		if err != nil {
			return err
		}
		slices.Sort(files) // Mosquitto reads them in alphabetical order
		at := im.at
		for _, f := range files {
			if err := im.file(f); err != nil {
				return err
			}
		}
		im.at = at
	case "per_listener_settings":
		im.perListener = arg == "true"
	case "listener":
		if err := need(); err != nil {
			return err
		}
		l := &listener{port: arg, from: im.at}
		if len(args) > 1 {
			l.bind = args[1]
		}
		im.listeners = append(im.listeners, l)
	case "port":
		if err := need(); err != nil {
			return err
		}
		im.defaultListener().port = arg
	case "bind_address":
		if err := need(); err != nil {
			return err
		}
		im.defaultListener().bind = arg
	case "protocol":
		switch arg {
		case "websockets":
			im.listener().websockets = true
		case "mqtt", "":
		default:
			im.note("protocol %q: linemq's listeners speak MQTT over TCP, TLS or WebSockets", arg)
		}
	case "certfile":
		im.listener().certFile = arg
	case "keyfile":
		im.listener().keyFile = arg
	case "cafile":
		im.listener().caFile = arg
	case "require_certificate":
		im.listener().requireCert = arg == "true"
	case "use_identity_as_username", "use_subject_as_username":
		v := arg == "true"
		im.listener().identityAsUsername = &v
	case "max_connections":
		v := count(arg)
		if len(im.listeners) == 0 {
			im.maxConnections = v
		} else {
			im.listener().maxConnections = v
		}
	case "allow_anonymous":
		v := arg == "true"
		im.authFor().allowAnonymous = &v
		im.authFor().mark(im.at)
	case "password_file":
		im.authFor().passwordFile = arg
		im.authFor().mark(im.at)
	case "acl_file":
		im.authFor().aclFile = arg
		im.authFor().mark(im.at)
	case "persistence":
		if arg == "false" {
			im.note("linemq always keeps persistent sessions, their QoS 1 and 2 messages and retained messages on disk (storage.sync says how often it syncs); there is no switch to keep them in memory only")
		}
	case "persistence_location":
		im.note("not carried over: linemq keeps its database in data_dir (/var/lib/linemq under its systemd unit), apart from Mosquitto's")
	case "persistence_file":
		im.note("linemq's database is <data_dir>/linemq.db; Mosquitto's file is not read (sessions start afresh on the switch)")
	case "autosave_interval", "autosave_on_changes":
		im.note("not needed: linemq commits every change within storage.batch_interval (10ms), before it acknowledges it")
	case "max_queued_messages":
		im.maxQueued = count(arg)
	case "max_packet_size":
		n, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number of bytes", arg)
		}
		im.maxPacket = n
	case "message_size_limit":
		n, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number of bytes", arg)
		}
		im.messageLimit = n
	case "max_keepalive":
		im.maxKeepAlive = arg + "s"
	case "sys_interval":
		im.sysInterval = arg + "s"
	case "queue_qos0_messages":
		v := arg == "true"
		im.queueQoS0 = &v
	case "retain_available":
		v := arg == "true"
		im.retainAvail = &v
	case "log_type":
		if arg == "debug" || arg == "all" {
			im.logLevel = "debug"
		}
	case "log_dest", "log_timestamp", "log_timestamp_format", "connection_messages", "websockets_log_level", "log_facility":
		im.note("linemq logs to standard error, which systemd's journal keeps (log_level, log_format)")
	case "user", "pid_file":
		im.note("the systemd unit runs linemq as its own user; no PID file is needed")
	case "max_inflight_messages", "max_inflight_bytes":
		im.note("no equivalent: linemq keeps to an MQTT 5 client's Receive Maximum and sends a 3.1.1 client as much as mqtt.max_pending_bytes allows")
	case "max_queued_bytes":
		im.note("no equivalent: mqtt.max_queued_messages bounds a session's queue in messages, mqtt.max_pending_bytes what waits to be written to a connection")
	case "set_tcp_nodelay":
		im.note("not needed: linemq always sets TCP_NODELAY")
	case "allow_zero_length_clientid", "auto_id_prefix":
		im.note("linemq gives a client that sends an empty client id (MQTT 5, or 3.1.1 with a clean session) an id of its own; the prefix is not configurable")
	case "persistent_client_expiration":
		im.note("not carried over: linemq expires a session after the Session Expiry Interval its client asked for (3.1.1 persistent sessions never expire); mqtt.max_session_expiry caps what clients may ask")
	case "capath", "crlfile", "tls_version", "ciphers", "ciphers_tls1.3", "tls_engine", "tls_keyform", "tls_engine_kpass_sha1", "dhparamfile", "ecdh_curve":
		im.note("not carried over: linemq's TLS is version 1.2 or later with Go's default cipher suites, and its CAs come from one PEM file (ca_file)")
	case "psk_file", "psk_hint":
		im.note("TLS pre-shared keys are not supported: use certificates (ca_file, cert_file, key_file)")
	case "mount_point":
		im.note("not supported: linemq has no per-listener topic prefix")
	case "http_dir":
		im.note("linemq's own status page is served by its HTTP listener (http.listen); it serves no other files")
	case "socket_domain":
		im.note("linemq binds the address given (listeners[].address); write an IPv4 or IPv6 address there to choose")
	case "auth_plugin", "plugin", "auth_opt", "plugin_opt":
		im.note("plugins are not supported: linemq reads Mosquitto's password and ACL files (auth.password_file, auth.acl_file)")
	case "max_qos", "upgrade_outgoing_qos", "check_retain_source", "memory_limit", "retained_persistence", "clientid_prefixes", "accept_protocol_versions":
		im.note("no equivalent in linemq")
	default:
		im.note("unknown to the importer; not carried over")
	}
	return nil
}

// bridgeDirectives are the bridge options without the bridge_ prefix.
var bridgeDirectives = []string{"connection", "address", "addresses", "topic", "remote_clientid", "clientid",
	"remote_username", "username", "remote_password", "password", "keepalive_interval", "cleansession",
	"try_private", "notifications", "notifications_local_only", "notification_topic", "start_type",
	"restart_timeout", "idle_timeout", "threshold", "round_robin", "local_clientid", "local_username",
	"local_password", "local_cleansession", "max_topic_alias"}

// bridgeDirective applies one line of a bridge's section.
func (im *importer) bridgeDirective(name string, args []string, text string) error {
	arg := ""
	if len(args) > 0 {
		arg = args[0]
	}
	if name == "connection" {
		if arg == "" {
			return errNoValue
		}
		im.bridges = append(im.bridges, &bridge{name: arg, from: im.at, protocol: 311})
		return nil
	}
	if len(im.bridges) == 0 {
		im.note("outside a bridge's section (connection NAME first); not carried over")
		return nil
	}
	b := im.bridges[len(im.bridges)-1]
	switch name {
	case "address", "addresses":
		if arg == "" {
			return errNoValue
		}
		b.addresses = append(b.addresses, args...)
	case "topic":
		return im.topic(b, text)
	case "remote_clientid", "clientid":
		b.clientID = arg
	case "remote_username", "username":
		b.username = arg
	case "remote_password", "password":
		b.password = arg
	case "bridge_cafile":
		b.caFile, b.tlsWanted = arg, true
	case "bridge_certfile":
		b.certFile, b.tlsWanted = arg, true
	case "bridge_keyfile":
		b.key, b.tlsWanted = arg, true
	case "bridge_insecure":
		if arg == "true" {
			im.note("not carried over: linemq always verifies the remote's certificate and name (set tls.server_name if the name differs)")
		}
	case "bridge_protocol_version":
		switch arg {
		case "mqttv50":
			b.protocol = 5
		case "mqttv311":
			b.protocol = 311
		default:
			im.note("%q: linemq bridges speak MQTT 5 or 3.1.1; 3.1.1 is used", arg)
		}
	case "keepalive_interval":
		b.keepAlive = arg + "s"
	case "cleansession":
		if arg == "true" {
			im.note("linemq's bridge keeps a session at the remote (session_expiry, 1h by default) so that messages for its in rules wait there while the link is down")
		}
	case "bridge_capath", "bridge_tls_version", "bridge_identity", "bridge_psk", "bridge_alpn", "bridge_require_ocsp", "bridge_ciphers":
		im.note("not carried over: a linemq bridge's TLS takes ca_file, cert_file, key_file and server_name")
	default:
		im.note("no equivalent in linemq's bridges; not carried over")
	}
	return nil
}

// topic reads `topic pattern [[[out|in|both] qos] local-prefix remote-prefix]`.
func (im *importer) topic(b *bridge, text string) error {
	f := splitQuoted(strings.TrimSpace(strings.TrimPrefix(text, "topic")))
	if len(f) == 0 {
		return errNoValue
	}
	pattern, dir, qos, local, remote := f[0], "out", 0, "", ""
	if len(f) > 1 {
		dir = f[1]
	}
	if len(f) > 2 {
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 || n > 2 {
			return fmt.Errorf("QoS %q is not 0, 1 or 2", f[2])
		}
		qos = n
	}
	if len(f) > 3 {
		local = f[3]
	}
	if len(f) > 4 {
		remote = f[4]
	}
	if qos == 2 {
		im.note("QoS 2 forwarded as QoS 1: linemq's bridges carry QoS 0 and 1 (QoS 1 through their store-and-forward queue)")
		qos = 1
	}
	if pattern == "" {
		im.note("an empty pattern (the prefix is the whole topic) is not carried over: write the topic as the pattern")
		return nil
	}
	q := qos
	out := rule{Filter: local + pattern, Strip: local, Prefix: remote, QoS: &q}
	in := rule{Filter: remote + pattern, Strip: remote, Prefix: local, QoS: &q}
	switch dir {
	case "out":
		b.out = append(b.out, out)
	case "in":
		b.in = append(b.in, in)
	case "both":
		b.out = append(b.out, out)
		b.in = append(b.in, in)
		b.both = true
	default:
		return fmt.Errorf("direction %q is not out, in or both", dir)
	}
	return nil
}

// count turns a Mosquitto count into a linemq limit: a number, or
// "unlimited" for Mosquitto's 0 and -1.
func count(s string) any {
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return s // the linemq configuration reports it, with its key
	case n <= 0:
		return "unlimited"
	}
	return n
}

// splitQuoted splits s on blanks, reading "" as an empty field.
func splitQuoted(s string) []string {
	var out []string
	for _, f := range strings.Fields(s) {
		if f == `""` {
			f = ""
		}
		out = append(out, f)
	}
	return out
}

// defaultListener returns Mosquitto's default listener (port,
// bind_address), made on first use.
func (im *importer) defaultListener() *listener {
	if im.defaults == nil {
		im.defaults = &listener{port: "1883", from: im.at}
	}
	return im.defaults
}

// listener returns the listener the listener options apply to: the last
// listener line's, or the default listener.
func (im *importer) listener() *listener {
	if n := len(im.listeners); n > 0 {
		return im.listeners[n-1]
	}
	return im.defaultListener()
}

// authFor returns where allow_anonymous, password_file and acl_file go:
// the current listener's with per_listener_settings, else the global ones.
func (im *importer) authFor() *authSettings {
	if im.perListener && len(im.listeners) > 0 {
		return &im.listener().auth
	}
	return &im.auth
}

func (a *authSettings) mark(at Note) {
	if a.where.File == "" {
		a.where = at
	}
}

// finish settles what depends on the whole file: listeners' own password
// and ACL files (linemq has one of each), and the default listener.
func (im *importer) finish() {
	all := im.listeners
	if im.defaults != nil {
		all = append([]*listener{im.defaults}, all...)
	}
	for _, l := range all {
		a := &l.auth
		for _, f := range []struct {
			name string
			own  *string
			glob *string
		}{{"password_file", &a.passwordFile, &im.auth.passwordFile}, {"acl_file", &a.aclFile, &im.auth.aclFile}} {
			switch {
			case *f.own == "":
			case *f.glob == "" || *f.glob == *f.own:
				*f.glob = *f.own
			default:
				im.at = a.where
				im.at.Directive = f.name
				im.note("linemq has one %s for all listeners; %s is used, %s is not", f.name, *f.glob, *f.own)
			}
		}
		if l.identityAsUsername != nil && !*l.identityAsUsername && l.caFile != "" {
			im.at = l.from
			im.at.Directive = "use_identity_as_username"
			im.note("with ca_file linemq takes a verified client certificate's name as the user name; it cannot be turned off")
		}
		if l.websockets {
			im.at = l.from
			im.at.Directive = "protocol websockets"
			im.note("Mosquitto takes WebSocket clients on any path, linemq on one: /mqtt here; set listeners[].path to the one your clients use")
		}
	}
}

// Output shapes: field order is the order written.
type (
	outConfig struct {
		LogLevel  string        `yaml:"log_level,omitempty"`
		MQTT      *outMQTT      `yaml:"mqtt,omitempty"`
		Listeners []outListener `yaml:"listeners,omitempty"`
		Auth      *outAuth      `yaml:"auth,omitempty"`
		Bridges   []outBridge   `yaml:"bridges,omitempty"`
	}
	outMQTT struct {
		MaxPacketSize   int64  `yaml:"max_packet_size,omitempty"`
		MaxKeepAlive    string `yaml:"max_keepalive,omitempty"`
		MaxQueued       any    `yaml:"max_queued_messages,omitempty"`
		QueueQoS0       *bool  `yaml:"queue_qos0_messages,omitempty"`
		RetainAvailable *bool  `yaml:"retain_available,omitempty"`
		SysInterval     string `yaml:"sys_interval,omitempty"`
		MaxConnections  any    `yaml:"max_connections,omitempty"`
	}
	outListener struct {
		Type              string `yaml:"type"`
		Address           string `yaml:"address"`
		CertFile          string `yaml:"cert_file,omitempty"`
		KeyFile           string `yaml:"key_file,omitempty"`
		CAFile            string `yaml:"ca_file,omitempty"`
		RequireClientCert bool   `yaml:"require_client_cert,omitempty"`
		MaxConnections    any    `yaml:"max_connections,omitempty"`
		AllowAnonymous    *bool  `yaml:"allow_anonymous,omitempty"`
	}
	outAuth struct {
		AllowAnonymous *bool  `yaml:"allow_anonymous,omitempty"`
		PasswordFile   string `yaml:"password_file,omitempty"`
		ACLFile        string `yaml:"acl_file,omitempty"`
		ACLOverlap     string `yaml:"acl_overlap,omitempty"`
	}
	outBridge struct {
		Name      string   `yaml:"name"`
		Addresses []string `yaml:"addresses"`
		Protocol  int      `yaml:"protocol"`
		ClientID  string   `yaml:"client_id,omitempty"`
		Username  string   `yaml:"username,omitempty"`
		Password  string   `yaml:"password,omitempty"`
		TLS       *outTLS  `yaml:"tls,omitempty"`
		KeepAlive string   `yaml:"keepalive,omitempty"`
		Out       []rule   `yaml:"out,omitempty"`
		In        []rule   `yaml:"in,omitempty"`
	}
	outTLS struct {
		CAFile   string `yaml:"ca_file,omitempty"`
		CertFile string `yaml:"cert_file,omitempty"`
		KeyFile  string `yaml:"key_file,omitempty"`
	}
)

// bridgeName is what linemq accepts as a bridge's name.
var bridgeName = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// render writes the linemq configuration.
func (im *importer) render() ([]byte, error) {
	var c outConfig
	c.LogLevel = im.logLevel
	m := &outMQTT{MaxKeepAlive: im.maxKeepAlive, MaxQueued: im.maxQueued, QueueQoS0: im.queueQoS0,
		RetainAvailable: im.retainAvail, SysInterval: im.sysInterval}
	switch {
	case im.maxPacket > 0 && (im.messageLimit == 0 || im.maxPacket <= im.messageLimit):
		m.MaxPacketSize = im.maxPacket
	case im.messageLimit > 0:
		// Mosquitto bounds the payload, linemq the packet: room for the
		// longest topic and the properties on top.
		m.MaxPacketSize = im.messageLimit + 65536 + 1024
		if im.maxPacket > 0 {
			m.MaxPacketSize = min(m.MaxPacketSize, im.maxPacket)
		}
	}
	if m.MaxPacketSize != 0 || m.MaxKeepAlive != "" || m.MaxQueued != nil || m.QueueQoS0 != nil ||
		m.RetainAvailable != nil || m.SysInterval != "" {
		c.MQTT = m
	}
	all := im.listeners
	if im.defaults != nil {
		all = append([]*listener{im.defaults}, all...)
	}
	if len(all) == 0 {
		// Mosquitto 2 without a listener serves local clients only, and
		// lets them in without a password.
		all = []*listener{{port: "1883", bind: "127.0.0.1"}}
		if im.auth.allowAnonymous == nil && im.auth.passwordFile == "" {
			t := true
			all[0].auth.allowAnonymous = &t
		}
	} else if im.auth.allowAnonymous == nil {
		// Mosquitto 2 with listeners lets nobody in anonymously unless
		// told to; linemq's default would let local clients in.
		f := false
		im.auth.allowAnonymous = &f
	}
	for _, l := range all {
		ol := outListener{Type: "tcp", Address: net.JoinHostPort(l.bind, l.port), CertFile: l.certFile, KeyFile: l.keyFile,
			CAFile: l.caFile, RequireClientCert: l.requireCert, MaxConnections: l.maxConnections, AllowAnonymous: l.auth.allowAnonymous}
		if l.bind == "" {
			ol.Address = ":" + l.port
		}
		switch {
		case l.websockets && l.certFile != "":
			ol.Type = "wss"
		case l.websockets:
			ol.Type = "ws"
		case l.certFile != "":
			ol.Type = "tls"
		}
		if l == im.defaults && im.maxConnections != nil {
			ol.MaxConnections = im.maxConnections
		}
		c.Listeners = append(c.Listeners, ol)
	}
	if im.defaults == nil && im.maxConnections != nil {
		m.MaxConnections = im.maxConnections
		c.MQTT = m
	}
	a := &outAuth{AllowAnonymous: im.auth.allowAnonymous, PasswordFile: im.auth.passwordFile, ACLFile: im.auth.aclFile}
	if a.ACLFile != "" {
		// Mosquitto grants a filter that reaches a denied topic and keeps
		// that topic from it; linemq refuses such a filter unless told.
		a.ACLOverlap = "filter"
	}
	if *a != (outAuth{}) {
		c.Auth = a
	}
	names := map[string]bool{}
	for _, b := range im.bridges {
		if b.both && b.protocol != 5 {
			// A topic going both ways comes back to where it was
			// published unless the remote is told not to send a client
			// its own messages: MQTT 5's No Local. (Mosquitto relies on
			// try_private, which only another Mosquitto understands.)
			im.at = b.from
			im.note("bridge %q: protocol 5 instead of 3.1.1, for No Local on its topics that go both ways; the remote must speak MQTT 5", b.name)
			b.protocol = 5
		}
		ob := outBridge{Name: bridgeName.ReplaceAllString(b.name, "-"), Protocol: b.protocol, ClientID: b.clientID,
			Username: b.username, Password: b.password, KeepAlive: b.keepAlive, Out: b.out, In: b.in}
		for names[ob.Name] {
			ob.Name += "-2"
		}
		names[ob.Name] = true
		for _, addr := range b.addresses {
			if _, _, err := net.SplitHostPort(addr); err != nil {
				addr = net.JoinHostPort(addr, "1883") // Mosquitto's default, TLS or not
			}
			if b.tlsWanted {
				addr = "tls://" + addr
			}
			ob.Addresses = append(ob.Addresses, addr)
		}
		if b.tlsWanted {
			ob.TLS = &outTLS{CAFile: b.caFile, CertFile: b.certFile, KeyFile: b.key}
		}
		if len(ob.Addresses) == 0 || len(ob.Out)+len(ob.In) == 0 {
			im.at = b.from
			im.note("bridge %q has no address or no topic: not carried over", b.name)
			continue
		}
		c.Bridges = append(c.Bridges, ob)
	}
	var buf bytes.Buffer
	buf.WriteString("# linemq.yaml, imported from Mosquitto's configuration by `linemq import-mosquitto`.\n")
	buf.WriteString("# The password and ACL files are read as they are: copy them where this file names them.\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
