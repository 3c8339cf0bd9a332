package topic

import "strings"

// MaxLen is the longest topic name or filter in bytes: both are UTF-8
// strings with a two-byte length prefix [MQTT-4.7.3-3].
const MaxLen = 65535

// SharePrefix starts every shared subscription filter [MQTT-4.8.2-1].
const SharePrefix = "$share/"

// text is what validation accepts: names come from the decoder as []byte,
// filters from SUBSCRIBE as []byte and from ParseShare as string. One generic
// body serves both without converting (a string-to-[]byte conversion of a
// long filter would allocate).
type text interface{ ~string | ~[]byte }

// ValidateName checks a topic name from a PUBLISH (or a will, a retained
// message, configuration): non-empty [MQTT-4.7.3-1], at most [MaxLen] bytes
// [MQTT-4.7.3-3], no U+0000 [MQTT-4.7.3-2] and no wildcard [MQTT-4.7.1-1]
// (5.0: [MQTT-4.7.0-1]). It does not check UTF-8 well-formedness, which is the
// decoder's job. Names starting with '$' are valid; whether a client may
// publish to them is broker policy.
func ValidateName(name []byte) error {
	if len(name) == 0 {
		return ErrEmptyName // [MQTT-4.7.3-1]
	}
	if len(name) > MaxLen {
		return ErrTooLong // [MQTT-4.7.3-3]
	}
	for _, c := range name {
		switch c {
		case 0:
			return ErrNullChar // [MQTT-4.7.3-2]
		case '+', '#':
			return ErrWildcardInName // [MQTT-4.7.1-1] (5.0: [MQTT-4.7.0-1])
		}
	}
	return nil
}

// ValidateFilter checks a topic filter from a SUBSCRIBE or UNSUBSCRIBE:
// non-empty [MQTT-4.7.3-1], at most [MaxLen] bytes [MQTT-4.7.3-3], no U+0000
// [MQTT-4.7.3-2], '#' only alone in the last level [MQTT-4.7.1-2] and '+' only
// alone in its level [MQTT-4.7.1-3] (5.0: [MQTT-4.7.1-1], [MQTT-4.7.1-2]).
//
// It is not aware of shared subscriptions: "$share/g/x" is a valid ordinary
// filter to it. Call [ParseShare] first and validate the filter it returns.
func ValidateFilter(filter []byte) error { return validateFilter(filter) }

func validateFilter[T text](f T) error {
	n := len(f)
	if n == 0 {
		return ErrEmptyFilter // [MQTT-4.7.3-1]
	}
	if n > MaxLen {
		return ErrTooLong // [MQTT-4.7.3-3]
	}
	for i := 0; i < n; i++ {
		switch f[i] {
		case 0:
			return ErrNullChar // [MQTT-4.7.3-2]
		case '#':
			// On its own or after a '/', and the last character.
			if (i > 0 && f[i-1] != '/') || i != n-1 {
				return ErrBadMultiLevel // [MQTT-4.7.1-2] (5.0: [MQTT-4.7.1-1])
			}
		case '+':
			// Occupies an entire level.
			if (i > 0 && f[i-1] != '/') || (i < n-1 && f[i+1] != '/') {
				return ErrBadSingleLevel // [MQTT-4.7.1-3] (5.0: [MQTT-4.7.1-2])
			}
		}
	}
	return nil
}

// ParseShare splits a shared subscription filter "$share/<group>/<filter>"
// into its group (the ShareName) and filter.
//
// A filter that does not start with "$share/" is ordinary: ParseShare returns
// group "", rest equal to filter, shared false and a nil error, and does not
// validate it (call [ValidateFilter]). "$share" alone and "$sharex/a" are
// ordinary filters.
//
// For a "$share/" filter shared is true even when err is not nil, so the
// caller can answer with the reason code for shared subscriptions. The group
// must be non-empty [MQTT-4.8.2-1] and free of '/', '+' and '#', and be
// followed by '/' and a valid filter [MQTT-4.8.2-2]; otherwise err matches
// [ErrBadShare] (and, when the filter part is invalid, that filter's error
// as well) and group and rest are empty. Everything after the group's '/'
// is the filter, so "$share/consumer1//finance" is group "consumer1" and
// filter "/finance".
//
// MQTT 3.1.1 has no shared subscriptions; whether to call ParseShare for a
// 3.1.1 client's filters is broker policy.
func ParseShare(filter string) (group, rest string, shared bool, err error) {
	if !strings.HasPrefix(filter, SharePrefix) {
		return "", filter, false, nil
	}
	if len(filter) > MaxLen {
		return "", "", true, &shareError{ErrTooLong} // [MQTT-4.7.3-3]
	}
	s := filter[len(SharePrefix):]
	slash := strings.IndexByte(s, '/')
	if slash < 0 {
		// "$share/group" with no filter: the group MUST be followed by
		// a '/' and a filter [MQTT-4.8.2-2].
		return "", "", true, ErrBadShare
	}
	group, rest = s[:slash], s[slash+1:]
	if group == "" {
		return "", "", true, ErrBadShare // [MQTT-4.8.2-1]
	}
	// The '/' case cannot occur: group ends at the first '/'. U+0000 is
	// refused here as everywhere else in a filter [MQTT-4.7.3-2].
	if strings.ContainsAny(group, "+#\x00") {
		return "", "", true, ErrBadShare // [MQTT-4.8.2-2]
	}
	if err := validateFilter(rest); err != nil {
		return "", "", true, &shareError{err} // [MQTT-4.8.2-2]
	}
	return group, rest, true, nil
}

// Match reports whether the topic filter matches the topic name.
//
// A '+' level matches exactly one level, possibly empty ("sport/+" matches
// "sport/" but not "sport"); a last level '#' matches its parent level and
// every level below it ("sport/#" matches "sport") [MQTT-4.7.1-2]. A name
// whose first level starts with '$' is not matched by a filter whose first
// level is '+' or '#' [MQTT-4.7.2-1]. Everything else compares level by level,
// byte for byte, with no normalisation [MQTT-4.7.3-4].
//
// Match expects a valid filter but does not check it: in an invalid one, a '+'
// level is still a wildcard, a '#' level that is not last is compared as the
// literal "#", and any other level is literal. [Index] follows the same rules.
//
// Match neither allocates nor validates; it is the reference for [Index.Match]
// and the right tool for one-off checks such as ACLs.
func Match(filter, name string) bool {
	if dollar(name) && wildFirst(filter) {
		return false // [MQTT-4.7.2-1]
	}
	// fi and ni index the start of the current level; past the end means
	// every level has been consumed (a trailing '/' leaves one empty level).
	fi, ni := 0, 0
	for fi <= len(filter) {
		fj := levelEnd(filter, fi)
		lev := filter[fi:fj]
		if lev == "#" && fj == len(filter) {
			return true // the rest of the name, even none of it [MQTT-4.7.1-2]
		}
		if ni > len(name) {
			return false // the filter has levels left
		}
		nj := levelEnd(name, ni)
		if lev != "+" && lev != name[ni:nj] {
			return false
		}
		fi, ni = fj+1, nj+1
	}
	return ni > len(name)
}

// dollar reports whether a name's first level starts with '$' (a server
// topic such as $SYS) for [MQTT-4.7.2-1].
func dollar[T text](name T) bool { return len(name) > 0 && name[0] == '$' }

// wildFirst reports whether a filter's first level is '+' or '#', the
// filters [MQTT-4.7.2-1] keeps away from '$' names. A non-last "#" level is
// literal (see Match) and a literal "#" never equals a level starting with
// '$', so treating it as wild here changes nothing.
func wildFirst(filter string) bool {
	return len(filter) > 0 && (filter[0] == '+' || filter[0] == '#') &&
		(len(filter) == 1 || filter[1] == '/')
}

// levelEnd returns the index of the '/' that ends the level starting at i,
// or len(s) for the last level.
func levelEnd[T text](s T, i int) int {
	for j := i; j < len(s); j++ {
		if s[j] == '/' {
			return j
		}
	}
	return len(s)
}

// isLiteral reports whether filter has no wildcard level under Match's
// rules, so that the only name it matches is itself.
func isLiteral(filter string) bool {
	if filter == "#" || strings.HasSuffix(filter, "/#") {
		return false
	}
	for i := 0; i < len(filter); i++ {
		if filter[i] == '+' && (i == 0 || filter[i-1] == '/') && (i == len(filter)-1 || filter[i+1] == '/') {
			return false
		}
	}
	return true
}
