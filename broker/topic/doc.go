// Package topic is MQTT topic names and topic filters: validation, shared
// subscription parsing, and an [Index] from filters to subscribers that a
// PUBLISH is matched against.
//
// # Model
//
// A topic is a sequence of levels separated by '/'. Empty levels are real
// levels: "/finance" has two ("" and "finance"), "sport/" has two, and ""
// would have one (but empty names and filters are invalid). A filter level
// "+" matches exactly one level, and a last level "#" matches the parent
// level and any number of levels below it, so "sport/#" matches "sport".
// Names whose first level starts with '$' (such as "$SYS/broker/uptime") are
// not matched by filters whose first level is '+' or '#' [MQTT-4.7.2-1].
//
// [ValidateName] and [ValidateFilter] check the rules the spec puts on names
// (PUBLISH) and filters (SUBSCRIBE, UNSUBSCRIBE). [ParseShare] splits a
// shared subscription "$share/<group>/<filter>" into its group and filter;
// ValidateFilter itself knows nothing of "$share". [Match] decides whether
// one filter matches one name and is the reference the Index is tested
// against; use it for ACLs and other one-off checks.
//
// [Index] is a trie keyed by level, in the manner of the NATS sublist: each
// node holds its literal children in a map and its '+' and '#' children
// apart, so matching a name is one walk over its levels that branches only
// where a '+' exists. Results are kept in a bounded cache keyed by the topic
// name, so a repeated PUBLISH topic costs one hash, one read lock and one map
// lookup, and no allocation.
//
// # Caveats
//
// The slice returned by [Index.Match] is shared: the same slice is returned
// to every caller that matches the same name until a subscription change
// invalidates it. Callers must not modify it, append to it in place, or
// keep it expecting it to follow later changes. It is never modified after
// it is returned, so it stays valid (and describes the subscriptions at the
// time of the match) after later Add and Remove calls.
//
// A value added under two filters that both match a name appears twice in
// that name's result; the caller deduplicates. Whether overlapping
// subscriptions get one copy or one per subscription (MQTT 5.0 section 3.3.4)
// is broker policy, so the index reports every match.
//
// Index methods take filters as given. They expect filters that passed
// [ValidateFilter] (after [ParseShare] for shared ones); an invalid filter is
// stored and matched level by level with '+' always a wildcard and '#' a
// wildcard only as the last level, exactly as [Match] treats it.
//
// Rule IDs in comments follow MQTT 3.1.1 numbering where it differs from
// MQTT 5.0 for the same rule, and give the 5.0 ID after it: 3.1.1's
// [MQTT-4.7.1-1], [MQTT-4.7.1-2] and [MQTT-4.7.1-3] are 5.0's
// [MQTT-4.7.0-1], [MQTT-4.7.1-1] and [MQTT-4.7.1-2].
//
// # Locking
//
// Lock order is Index.mu, then a cache shard's mutex. A cache hit takes only
// the shard's read lock. A miss walks the trie under Index.mu's read lock and
// stores the result while still holding it, so an Add or Remove (which hold
// Index.mu for writing while they change the trie and invalidate the cache)
// cannot slip between the walk and the store and leave a stale entry behind.
//
// This package depends on the standard library only.
package topic
