package auth

import (
	"errors"
	"fmt"
	"strconv"
)

// Config is the auth: section of linemq.yaml. The zero value is the safe
// default: no password file, no ACL, and anonymous clients accepted from
// loopback addresses only.
type Config struct {
	// PasswordFile is a password file in Mosquitto's format, read as is:
	// "user:$7$..." (PBKDF2-SHA512, what mosquitto_passwd 2.x and
	// `linemq passwd` write), "user:$6$..." (salted SHA-512, older
	// mosquitto_passwd) and bcrypt "$2a$/$2b$/$2y$" lines. Once it is set,
	// a client that gives a user name must give that user's password, and
	// anonymous clients are refused unless AllowAnonymous is true.
	PasswordFile string `yaml:"password_file"`

	// ACLFile is an access control list in Mosquitto's format (see the
	// package documentation). Once it is set, whatever it does not allow
	// is denied. Empty means every connected client may publish and
	// subscribe everywhere.
	ACLFile string `yaml:"acl_file"`

	// AllowAnonymous decides about clients that give no user name (and
	// no client certificate). Nil, the default, accepts them from loopback
	// addresses only, and only while no password file is set. True
	// accepts them from anywhere; false refuses them everywhere, loopback
	// included.
	AllowAnonymous *bool `yaml:"allow_anonymous"`

	// ACLOverlap decides about a subscription that lies within a read
	// rule but overlaps a deny rule ("plant/#" beside "topic deny
	// plant/line3/recipes/#"). "refuse", the default, refuses it (SUBACK
	// 0x87). "filter" grants it, as Mosquitto does, and then never sends
	// the client a message it may not read, live, queued or retained, on
	// any subscription, shared or not; every message to a client of an
	// ACL file is then checked against its rules.
	ACLOverlap string `yaml:"acl_overlap"`
}

// The values of Config.ACLOverlap.
const (
	OverlapRefuse = "refuse"
	OverlapFilter = "filter"
)

// Error is one configuration error: the key relative to auth: and what is
// wrong with it. Validate returns them joined (errors.Join), so a caller
// can list them, or find their keys with errors.As over Unwrap() []error,
// as it does for package hw.
type Error struct {
	Key string // "password_file"
	Err error  // what is wrong with it; a *ParseError for a bad line
}

// Error implements error.
func (e *Error) Error() string { return e.Key + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// ParseError is a problem with one line of a password or ACL file, in the
// "file:line: problem" form editors and CI logs turn into links.
type ParseError struct {
	File string // as configured
	Line int    // 1-based; 0 for the file as a whole
	Err  error
}

// Error implements error.
func (e *ParseError) Error() string {
	if e.Line == 0 {
		return e.File + ": " + e.Err.Error()
	}
	return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *ParseError) Unwrap() error { return e.Err }

// Validate reports every problem with c, each an *Error naming its key,
// joined. It reads and parses the files, so that a bad line is reported
// with its file:line before the gateway starts rather than when the first
// client connects; a file that is missing or unreadable is an error too.
func (c *Config) Validate() error {
	var errs []error
	if c.PasswordFile != "" {
		if _, err := loadPasswords(c.PasswordFile); err != nil {
			errs = append(errs, &Error{Key: "password_file", Err: err})
		}
	}
	if c.ACLFile != "" {
		if _, err := loadACL(c.ACLFile); err != nil {
			errs = append(errs, &Error{Key: "acl_file", Err: err})
		}
	}
	switch c.ACLOverlap {
	case "", OverlapRefuse, OverlapFilter:
	default:
		errs = append(errs, &Error{Key: "acl_overlap", Err: fmt.Errorf("%q is neither %q nor %q", c.ACLOverlap, OverlapRefuse, OverlapFilter)})
	}
	return errors.Join(errs...)
}

// fileErrors turns the joined errors of a file into one error per line,
// at most maxFileErrors of them, so that a file that is not in the format
// at all (a YAML file given as the ACL) does not flood the log.
func fileErrors(file string, errs []*ParseError) error {
	if len(errs) == 0 {
		return nil
	}
	out := make([]error, 0, min(len(errs), maxFileErrors)+1)
	for i, e := range errs {
		if i == maxFileErrors {
			out = append(out, &ParseError{File: file, Err: fmt.Errorf("%d more problems", len(errs)-maxFileErrors)})
			break
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// maxFileErrors bounds the problems reported for one file.
const maxFileErrors = 20
