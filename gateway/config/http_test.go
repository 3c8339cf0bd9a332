package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/linemq/linemq/gateway/auth"
)

// TestHTTPLogin: http.login, http.users and update.admins, their default and their
// errors, each naming the key and the line.
func TestHTTPLogin(t *testing.T) {
	h, err := auth.NewHash([]byte("pw"), 10)
	if err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(pw, []byte("ops:"+h+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withFile := lines("auth:", "  password_file: "+pw)
	tests := []struct {
		name, yaml string
		required   bool
		want       string // the Validate error, "" for none
	}{
		{name: "default without a password file", yaml: "", required: false},
		{name: "default with a password file", yaml: withFile, required: true},
		{name: "off", yaml: withFile + lines("http:", "  login: off"), required: false},
		{name: "users", yaml: withFile + lines("http:", "  login: required", "  users: [ops, shift-lead]"), required: true},
		{
			name: "required without a password file", yaml: lines("http:", "  login: required"), required: true,
			want: `linemq.yaml:2: http.login: required needs auth.password_file: the login checks its users and passwords`,
		},
		{
			name: "users without a login", yaml: withFile + lines("http:", "  login: off", "  users:", "    - ops"),
			want: `linemq.yaml:5: http.users: has no effect without a login (auth.password_file, and http.login not off)`,
		},
		{
			name: "bad user names", yaml: withFile + lines("http:", "  users:", "    - ops", "    - \"a:b\"", "    - ops"), required: true,
			want: "linemq.yaml:6: http.users[1]: user name contains ':', the password file's separator\n" +
				`linemq.yaml:7: http.users[2]: "ops" repeats http.users[0]`,
		},
		{name: "admins", yaml: withFile + lines("update:", "  admins: [ops]"), required: true},
		{
			name: "admins without a login", yaml: lines("update:", "  admins: [ops]"),
			want: `linemq.yaml:2: update.admins: needs the HTTP login (auth.password_file, and http.login not off): an upload must come from a known user`,
		},
		{
			name: "admins not among the users", yaml: withFile + lines("http:", "  users: [ops]", "update:", "  admins:", "    - ops", "    - night", "    - ops"), required: true,
			want: `linemq.yaml:8: update.admins[1]: "night" is not one of http.users, so could not log in to upload` + "\n" +
				`linemq.yaml:9: update.admins[2]: "ops" repeats update.admins[0]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), file)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got := ""
			if err := c.Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate error\n got: %s\nwant: %s", got, tt.want)
			}
			if c.HTTPLoginRequired() != tt.required {
				t.Errorf("HTTPLoginRequired() = %v", !tt.required)
			}
		})
	}
	if _, err := Parse([]byte(lines("http:", "  login: maybe")), file); err == nil || err.Error() != `linemq.yaml:2: http.login: unknown value "maybe" (valid: required, off)` {
		t.Errorf("login: maybe: %v", err)
	}
}

// TestNewKeysAccepted: auth.acl_overlap's two values pass, and
// mqtt.max_connect_size and max_connecting_bytes reach the broker (their
// errors are rows of TestValidateErrors).
func TestNewKeysAccepted(t *testing.T) {
	parse := func(yaml string) *Config {
		t.Helper()
		c, err := Parse([]byte(yaml), file)
		if err != nil || c.Validate() != nil {
			t.Fatalf("%q: Parse: %v; Validate: %v", yaml, err, c.Validate())
		}
		return c
	}
	parse(lines("auth:", "  acl_overlap: filter"))
	parse(lines("auth:", "  acl_overlap: refuse"))
	o := parse(lines("mqtt:", "  max_connect_size: 16KiB", "  max_connecting_bytes: 8MiB")).BrokerOptions()
	if o.MaxConnectSize != 16<<10 || o.MaxConnectingBytes != 8<<20 {
		t.Errorf("BrokerOptions: %d, %d", o.MaxConnectSize, o.MaxConnectingBytes)
	}
}
