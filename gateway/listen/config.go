package listen

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/linemq/linemq/gateway/certs"
)

// Type is a listener's transport.
type Type string

// The listener types.
const (
	TCP Type = "tcp" // MQTT over plain TCP
	TLS Type = "tls" // MQTT over TLS
	WS  Type = "ws"  // MQTT over WebSocket
	WSS Type = "wss" // MQTT over WebSocket over TLS
)

// Defaults of a Config.
const (
	DefaultType           = TCP
	DefaultPath           = "/mqtt"
	DefaultMaxConnections = 1024
)

// DefaultAddress is the address of a listener of each type that gives
// none: the IANA ports for MQTT and secure MQTT, and the ports commonly
// used for MQTT over WebSocket.
var DefaultAddress = map[Type]string{TCP: ":1883", TLS: ":8883", WS: ":8083", WSS: ":8084"}

// Config is one entry of the listeners: list in linemq.yaml. Unset (zero)
// fields stand for their defaults.
type Config struct {
	// Type is tcp (the default), tls, ws or wss.
	Type Type `yaml:"type"`

	// Address is host:port to listen on; ":port" listens on every
	// interface. Default by type: tcp :1883, tls :8883, ws :8083, wss :8084.
	Address string `yaml:"address"`

	// CertFile and KeyFile are the server's PEM certificate (chain) and
	// private key; required for tls and wss. Reload reads them again.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`

	// CAFile holds the PEM certificates of the authorities whose client
	// certificates are accepted (tls and wss). With it, a client that
	// presents a certificate has it verified, and the certificate's name
	// (its subject CN, else its first DNS, email or URI SAN) becomes the
	// client's user name.
	CAFile string `yaml:"ca_file"`

	// RequireClientCert refuses TLS clients without a valid certificate
	// signed by CAFile. Needs CAFile.
	RequireClientCert bool `yaml:"require_client_cert"`

	// CRLFile holds the PEM revocation lists of CAFile's authorities: a
	// client whose certificate is listed is refused, and one connected
	// with it is disconnected when the list arrives. Needs CAFile.
	CRLFile string `yaml:"crl_file"`

	// Path is the HTTP path of a ws or wss listener. Default /mqtt.
	Path string `yaml:"path"`

	// Origins are the host patterns (path.Match syntax, "*.plant.local")
	// of the web pages whose browsers may connect to a ws or wss listener,
	// besides pages from the gateway itself. Empty: same origin only, which
	// keeps a page elsewhere on the network from using a visitor's browser
	// to reach the broker. Clients that are not browsers send no Origin
	// and are not affected.
	Origins []string `yaml:"origins"`

	// MaxConnections bounds the connections open on this listener,
	// including those still in their TLS or WebSocket handshake; one
	// beyond it is closed as soon as it is accepted. Default 1024;
	// Unlimited for no bound.
	MaxConnections Limit `yaml:"max_connections"`

	// MaxPacketSize is the largest packet this listener's clients may
	// send (bytes, or with KiB or MiB: "64KiB"); a client sending a larger
	// one is disconnected (0x95). Zero: mqtt.max_packet_size. It can only
	// lower that bound, not raise it.
	MaxPacketSize Size `yaml:"max_packet_size"`

	// AllowAnonymous, when set, replaces auth.allow_anonymous for this
	// listener's clients: anonymous clients may use a loopback listener
	// for local tools while the plant-facing one asks for passwords.
	AllowAnonymous *bool `yaml:"allow_anonymous"`
}

// Size is a number of bytes, written plainly or with KiB or MiB.
type Size int

// UnmarshalYAML reads a size of 1 byte or more.
func (z *Size) UnmarshalYAML(n *yaml.Node) error {
	fail := fmt.Errorf
	num, mult := n.Value, int64(1)
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}} {
		if rest, ok := strings.CutSuffix(n.Value, u.suffix); ok {
			num, mult = rest, u.n
			break
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	switch {
	case n.Kind != yaml.ScalarNode || err != nil:
		return fail(`%q is not a size (a number of bytes, or one with KiB or MiB: "64KiB")`, n.Value)
	case v <= 0:
		return fail("must be 1 byte or more; leave the key out for mqtt.max_packet_size")
	case v > 268_435_460/mult:
		return fail("%s is larger than MQTT allows (256 MiB)", n.Value)
	}
	*z = Size(v * mult)
	return nil
}

// Unlimited is a MaxConnections of "unlimited" in a file: no bound. In
// code any negative value means the same.
const Unlimited = -1

// Limit is a count limit: a whole number, or Unlimited. The zero value
// stands for the default, and 0 written in a file is refused, as for every
// limit of linemq.yaml (0 would be ambiguous: the default, or nothing?).
type Limit int

// UnmarshalYAML reads a whole number of 1 or more, or "unlimited". Its
// errors say what is wrong; the configuration's decoder says where.
func (l *Limit) UnmarshalYAML(n *yaml.Node) error {
	fail := fmt.Errorf
	if n.Kind != yaml.ScalarNode {
		return fail("expected a whole number or unlimited")
	}
	if n.Value == "unlimited" {
		*l = Unlimited
		return nil
	}
	v, err := strconv.ParseInt(n.Value, 10, strconv.IntSize)
	switch {
	case err != nil:
		return fail("%q is not a whole number (or unlimited)", n.Value)
	case v == 0:
		return fail("0 is not allowed (1 or more, or unlimited); leave the key out for the default (%d)", DefaultMaxConnections)
	case v < 0:
		return fail("must not be negative (got %d)", v)
	}
	*l = Limit(v)
	return nil
}

// String returns the number, or "unlimited".
func (l Limit) String() string {
	if l < 0 {
		return "unlimited"
	}
	return strconv.Itoa(int(l))
}

// WithDefaults returns c with its unset fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Type == "" {
		c.Type = DefaultType
	}
	if c.Address == "" {
		c.Address = DefaultAddress[c.Type]
	}
	if c.Path == "" && (c.Type == WS || c.Type == WSS) {
		c.Path = DefaultPath
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	return c
}

// secure reports whether the type runs over TLS.
func (t Type) secure() bool { return t == TLS || t == WSS }

// web reports whether the type runs over WebSocket.
func (t Type) web() bool { return t == WS || t == WSS }

// Error is one configuration error: the key path, such as
// "listeners[1].cert_file", and what is wrong with it. Configs.Validate
// returns them joined (errors.Join).
type Error struct {
	Key string
	Err error
}

// Error implements error.
func (e *Error) Error() string { return e.Key + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Configs is the listeners: list of linemq.yaml.
type Configs []Config

// Validate reports every problem of every listener, each an *Error whose
// Key is the full key path ("listeners[1].cert_file"), joined. It reads
// the certificate, key and CA files, so that a wrong path or a key that
// does not match its certificate is reported before anything starts.
func (cs Configs) Validate() error {
	var errs []error
	used := make(map[string]string) // address -> the key that listens there
	for i, c := range cs {
		key := fmt.Sprintf("listeners[%d]", i)
		for _, err := range unjoin(c.Validate()) {
			var e *Error
			if errors.As(err, &e) {
				errs = append(errs, &Error{Key: key + "." + e.Key, Err: e.Err})
			} else {
				errs = append(errs, &Error{Key: key, Err: err})
			}
		}
		a := c.WithDefaults().Address
		if _, port, err := net.SplitHostPort(a); err == nil && port != "0" {
			if first, dup := used[a]; dup {
				errs = append(errs, &Error{Key: key + ".address", Err: fmt.Errorf("%s is also %s", a, first)})
			} else {
				used[a] = key + ".address"
			}
		}
	}
	return errors.Join(errs...)
}

// Validate reports the problems of one listener, each an *Error whose Key
// is relative to the listener ("cert_file").
func (c *Config) Validate() error {
	var errs []error
	fail := func(key string, format string, args ...any) {
		errs = append(errs, &Error{Key: key, Err: fmt.Errorf(format, args...)})
	}
	e := c.WithDefaults()
	switch e.Type {
	case TCP, TLS, WS, WSS:
	default:
		fail("type", "unknown type %q (valid: tcp, tls, ws, wss)", string(c.Type))
		return errors.Join(errs...)
	}
	if _, port, err := net.SplitHostPort(e.Address); err != nil {
		fail("address", "invalid address %q (write it as host:port, or :port for all interfaces)", e.Address)
	} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		fail("address", "invalid port %q in %q (need 0..65535)", port, e.Address)
	}
	if e.Type.secure() {
		switch {
		case c.CertFile == "":
			fail("cert_file", "required for a %s listener", e.Type)
		case c.KeyFile == "":
			fail("key_file", "required for a %s listener", e.Type)
		default:
			if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
				fail(certKey(c, err), "%v", plainTLSError(err))
			}
		}
		if c.CAFile != "" {
			if cas, err := certs.ParseCAs(c.CAFile); err != nil {
				fail("ca_file", "%v", err)
			} else if c.CRLFile != "" {
				if _, err := certs.LoadCRL(c.CRLFile, cas); err != nil {
					fail("crl_file", "%v", err)
				}
			}
		}
		if c.CRLFile != "" && c.CAFile == "" {
			fail("crl_file", "needs ca_file: the authorities whose revocation lists these are")
		}
		if c.RequireClientCert && c.CAFile == "" {
			fail("require_client_cert", "needs ca_file: the authorities whose client certificates to accept")
		}
	} else {
		for _, f := range []struct {
			key string
			set bool
		}{{"cert_file", c.CertFile != ""}, {"key_file", c.KeyFile != ""}, {"ca_file", c.CAFile != ""}, {"crl_file", c.CRLFile != ""}, {"require_client_cert", c.RequireClientCert}} {
			if f.set {
				fail(f.key, "only for tls and wss listeners (this one is %s)", e.Type)
			}
		}
	}
	if e.Type.web() {
		if !strings.HasPrefix(e.Path, "/") {
			fail("path", "%q must start with /", e.Path)
		}
		for j, o := range c.Origins {
			if _, err := path.Match(o, ""); err != nil || o == "" {
				fail(fmt.Sprintf("origins[%d]", j), "bad host pattern %q", o)
			}
		}
	} else {
		if c.Path != "" {
			fail("path", "only for ws and wss listeners (this one is %s)", e.Type)
		}
		if len(c.Origins) > 0 {
			fail("origins", "only for ws and wss listeners (this one is %s)", e.Type)
		}
	}
	return errors.Join(errs...)
}

// certKey says which of cert_file and key_file an error from
// tls.LoadX509KeyPair is about.
func certKey(c *Config, err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == c.KeyFile {
		return "key_file"
	}
	if strings.Contains(err.Error(), "private key") {
		return "key_file"
	}
	return "cert_file"
}

// plainTLSError drops the "tls: " prefix, which means nothing to someone
// editing a YAML file.
func plainTLSError(err error) string { return strings.TrimPrefix(err.Error(), "tls: ") }

// unjoin returns the errors joined in err, or err alone.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
