package auth

import (
	"bufio"
	"bytes"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"
)

// Password hashing as Mosquitto does it.
const (
	// DefaultIterations is the PBKDF2 iteration count NewHash uses when
	// given 0. mosquitto_passwd uses 101, cheap enough for a reconnect
	// storm on a small ARM board but little protection for a stolen file;
	// 1000 costs about 2 ms per CONNECT on a Cortex-A53 and ten times the
	// work for someone guessing offline.
	DefaultIterations = 1000

	// MaxIterations is the largest $7$ iteration count accepted in a
	// password file: each CONNECT with a user name costs that many
	// HMAC-SHA512 rounds, so a file with a huge count would let any client
	// keep the CPU busy.
	MaxIterations = 1_000_000

	// MaxBcryptCost is the largest bcrypt cost accepted in a password file,
	// for the same reason: each step doubles the work, and cost 14 is
	// already over a second on a Raspberry Pi.
	MaxBcryptCost = 14

	// saltLen and sumLen are what mosquitto_passwd 2.x writes: a 12-byte
	// salt and a 64-byte (SHA-512 sized) derived key.
	saltLen = 12
	sumLen  = sha512.Size

	// maxPasswordLine bounds a password file line; a real one is under 200
	// bytes.
	maxPasswordLine = 64 << 10
)

// hashKind is the scheme of one password hash.
type hashKind byte

const (
	kindSHA512 hashKind = '6' // $6$salt$sum: SHA-512(password || salt)
	kindPBKDF2 hashKind = '7' // $7$iterations$salt$sum: PBKDF2-HMAC-SHA512
	kindBcrypt hashKind = 'b' // $2a$, $2b$, $2y$
)

// hash is one user's stored password.
type hash struct {
	kind   hashKind
	iter   int    // kindPBKDF2
	salt   []byte // kindSHA512, kindPBKDF2
	sum    []byte // kindSHA512, kindPBKDF2
	bcrypt []byte // kindBcrypt: the whole hash as written
}

// verify reports whether password is the one h was made from. It takes the
// same time whatever the password, for a given h: the comparison is
// constant-time and nothing returns early.
func (h *hash) verify(password []byte) bool {
	switch h.kind {
	case kindBcrypt:
		return bcrypt.CompareHashAndPassword(h.bcrypt, password) == nil
	case kindSHA512:
		d := sha512.New()
		d.Write(password)
		d.Write(h.salt)
		return subtle.ConstantTimeCompare(d.Sum(nil), h.sum) == 1
	case kindPBKDF2:
		sum, err := pbkdf2.Key(sha512.New, string(password), h.salt, h.iter, len(h.sum))
		return err == nil && subtle.ConstantTimeCompare(sum, h.sum) == 1
	}
	return false
}

// parseHash reads the part of a password line after the colon.
func parseHash(s string) (*hash, error) {
	switch {
	case strings.HasPrefix(s, "$7$"):
		f := strings.Split(s, "$")
		if len(f) != 5 {
			return nil, errors.New("malformed $7$ hash (want $7$<iterations>$<salt>$<hash>)")
		}
		iter, err := strconv.Atoi(f[2])
		if err != nil || iter < 1 {
			return nil, fmt.Errorf("malformed $7$ hash: iteration count %q", f[2])
		}
		if iter > MaxIterations {
			return nil, fmt.Errorf("$7$ iteration count %d is above %d: every login would cost that much CPU", iter, MaxIterations)
		}
		salt, sum, err := saltAndSum(f[3], f[4])
		if err != nil {
			return nil, fmt.Errorf("malformed $7$ hash: %w", err)
		}
		return &hash{kind: kindPBKDF2, iter: iter, salt: salt, sum: sum}, nil
	case strings.HasPrefix(s, "$6$"):
		f := strings.Split(s, "$")
		if len(f) != 4 {
			return nil, errors.New("malformed $6$ hash (want $6$<salt>$<hash>)")
		}
		salt, sum, err := saltAndSum(f[2], f[3])
		if err != nil {
			return nil, fmt.Errorf("malformed $6$ hash: %w", err)
		}
		if len(sum) != sumLen {
			return nil, fmt.Errorf("malformed $6$ hash: %d-byte hash, want %d", len(sum), sumLen)
		}
		return &hash{kind: kindSHA512, salt: salt, sum: sum}, nil
	case strings.HasPrefix(s, "$2a$"), strings.HasPrefix(s, "$2b$"), strings.HasPrefix(s, "$2y$"):
		cost, err := bcrypt.Cost([]byte(s))
		if err != nil {
			return nil, fmt.Errorf("malformed bcrypt hash: %s", strings.TrimPrefix(err.Error(), "crypto/bcrypt: "))
		}
		if cost > MaxBcryptCost {
			return nil, fmt.Errorf("bcrypt cost %d is above %d: every login would take seconds of CPU", cost, MaxBcryptCost)
		}
		return &hash{kind: kindBcrypt, bcrypt: []byte(s)}, nil
	case strings.HasPrefix(s, "$"):
		kind, _, _ := strings.Cut(s[1:], "$")
		return nil, fmt.Errorf("unknown hash type $%s$ (known: $7$, $6$, $2a$, $2b$, $2y$)", kind)
	}
	return nil, errors.New("not a password hash: a plain-text password? Hash the file with `mosquitto_passwd -U FILE`, or set each user with `linemq passwd FILE USER`")
}

// saltAndSum decodes the base64 salt and hash of a $6$ or $7$ line.
func saltAndSum(salt64, sum64 string) (salt, sum []byte, err error) {
	salt, err = base64.StdEncoding.DecodeString(salt64)
	if err != nil || len(salt) == 0 {
		return nil, nil, errors.New("salt is not base64")
	}
	sum, err = base64.StdEncoding.DecodeString(sum64)
	if err != nil || len(sum) == 0 {
		return nil, nil, errors.New("hash is not base64")
	}
	return salt, sum, nil
}

// NewHash returns password hashed the way mosquitto_passwd 2.x does,
// "$7$<iterations>$<salt>$<hash>" (PBKDF2-HMAC-SHA512 with a random 12-byte
// salt), for a password file line "user:" + NewHash(...). iterations 0
// means DefaultIterations.
func NewHash(password []byte, iterations int) (string, error) {
	if iterations == 0 {
		iterations = DefaultIterations
	}
	if iterations < 1 || iterations > MaxIterations {
		return "", fmt.Errorf("auth: iteration count %d out of range (1..%d)", iterations, MaxIterations)
	}
	salt := make([]byte, saltLen)
	rand.Read(salt)
	sum, err := pbkdf2.Key(sha512.New, string(password), salt, iterations, sumLen)
	if err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	return "$7$" + strconv.Itoa(iterations) + "$" + base64.StdEncoding.EncodeToString(salt) + "$" +
		base64.StdEncoding.EncodeToString(sum), nil
}

// CheckUsername reports why name cannot be a user in a password file, or
// nil: it must be non-empty UTF-8 without ':' (the separator), control
// characters or surrounding spaces, and fit an MQTT string.
func CheckUsername(name string) error {
	switch {
	case name == "":
		return errors.New("empty user name")
	case len(name) > 65535:
		return errors.New("user name longer than 65535 bytes")
	case !utf8.ValidString(name):
		return errors.New("user name is not UTF-8")
	case strings.Contains(name, ":"):
		return errors.New("user name contains ':', the password file's separator")
	case strings.TrimSpace(name) != name:
		return errors.New("user name starts or ends with a space")
	case strings.ContainsFunc(name, unicode.IsControl):
		return errors.New("user name contains a control character")
	}
	return nil
}

// passwords is a parsed password file.
type passwords struct {
	users map[string]*hash
	// decoy is checked for a user name that is not in the file, so that
	// the answer takes as long as for one that is: it has the scheme and
	// cost of the file's first line. Without it, timing would tell which
	// user names exist.
	decoy *hash
}

// loadPasswords reads and parses a password file.
func loadPasswords(file string) (*passwords, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &ParseError{File: file, Err: pathError(err)}
	}
	return parsePasswords(file, data)
}

// parsePasswords parses the lines of a password file. Blank lines and
// lines starting with '#' are skipped, as Mosquitto does.
func parsePasswords(file string, data []byte) (*passwords, error) {
	p := &passwords{users: make(map[string]*hash)}
	first := make(map[string]int) // user -> its line, for repeats
	var errs []*ParseError
	fail := func(line int, format string, args ...any) {
		errs = append(errs, &ParseError{File: file, Line: line, Err: fmt.Errorf(format, args...)})
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxPasswordLine)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		if t := strings.TrimSpace(text); t == "" || t[0] == '#' {
			continue
		}
		user, h, ok := strings.Cut(text, ":")
		if !ok {
			fail(line, "no ':' between user name and hash")
			continue
		}
		if err := CheckUsername(user); err != nil {
			fail(line, "%v", err)
			continue
		}
		if at, dup := first[user]; dup {
			fail(line, "user %q repeats line %d", user, at)
			continue
		}
		first[user] = line
		hh, err := parseHash(strings.TrimSpace(h))
		if err != nil {
			fail(line, "user %q: %v", user, err)
			continue
		}
		p.users[user] = hh
		if p.decoy == nil {
			p.decoy = decoyFor(hh)
		}
	}
	if err := sc.Err(); err != nil {
		fail(line+1, "%v", err)
	}
	if err := fileErrors(file, errs); err != nil {
		return nil, err
	}
	if p.decoy == nil {
		p.decoy = decoyFor(&hash{kind: kindPBKDF2, iter: DefaultIterations})
	}
	return p, nil
}

// decoyFor returns a hash no password matches that costs as much to check
// as h.
func decoyFor(h *hash) *hash {
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	switch h.kind {
	case kindBcrypt:
		cost, _ := bcrypt.Cost(h.bcrypt)
		// A bcrypt hash of a random password: no password given in a
		// CONNECT can be it, short of guessing 32 random bytes.
		b, err := bcrypt.GenerateFromPassword(random(32), cost)
		if err == nil {
			return &hash{kind: kindBcrypt, bcrypt: b}
		}
	case kindSHA512:
		return &hash{kind: kindSHA512, salt: random(len(h.salt)), sum: random(sumLen)}
	}
	return &hash{kind: kindPBKDF2, iter: max(h.iter, 1), salt: random(saltLen), sum: random(sumLen)}
}
