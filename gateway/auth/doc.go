// Package auth decides who may connect to the broker and what they may
// publish and subscribe to, from the password and ACL files of Mosquitto,
// read as they are, so that a line moving from Mosquitto to linemq keeps
// its users and rules. [Authenticator] implements broker.Authenticator.
//
// # Who connects
//
// A client is one of three kinds:
//
//   - identified by a TLS client certificate (the listener verified it and
//     exposes its name through the connection's remote address, see
//     [Identity]): accepted, with that name as its user name;
//   - giving a user name while a password file is configured: accepted
//     with the right password, else refused with 0x86 (3.1.1: 0x04);
//   - anonymous: no user name, or a user name with no password file to
//     check it against (it would prove nothing). Accepted when
//     allow_anonymous is true, refused with 0x87 (3.1.1: 0x05) when it is
//     false, and when it is unset: accepted from loopback addresses only,
//     and only while no password file is configured. That default keeps a
//     fresh gateway usable on the machine itself (the quick start) without
//     opening it to the plant network; the first refusal logs how to open
//     up.
//
// Password checks are constant-time, a user name that does not exist costs
// as much as one that does, the hashes computed at once are bounded, and an
// address that keeps failing has its checks spaced out (see [Options]).
//
// # What they may do
//
// Without an ACL file every connected client may publish and subscribe
// anywhere. With one, everything not allowed is denied:
//
//	# anonymous clients: the lines before the first user line
//	topic read public/#
//
//	user historian
//	topic read plant/#
//	share historians                  # linemq: reserve this share name
//
//	user line3-plc
//	topic write plant/line3/#
//	topic deny plant/line3/recipes/#
//
//	# every client; %u is the user name, %c the client id
//	pattern readwrite devices/%c/#
//	pattern deny test/nosubscribe
//
// A client's rules are its own section's (the anonymous one for anonymous
// clients) and the pattern rules. A deny rule wins over any allow rule;
// deny takes away both reading and writing. Rules follow the spec's
// matching, so "#" and "+/..." do not reach "$SYS/..." [MQTT-4.7.2-1]; a
// rule for $SYS must name it.
//
// Write access lets a client publish to the topics a rule matches. Read
// access lets it subscribe, and a subscription is checked once, when it is
// made, so the filter must lie entirely within one read rule: with
// "topic read plant/line3/#", "plant/line3/+/temp" is granted and
// "plant/#" is refused (not granted and trimmed later), and a filter that
// overlaps a deny rule is refused too, "#" beside "topic deny secret/#"
// among them. The one exception is a global deny, a pattern deny without
// %u or %c: since no client may publish to its topics either, a wider
// filter can receive nothing from them, and only filters within the deny
// are refused. (Several rules that together cover a filter without one of
// them covering it do not grant it; write one wider rule.)
//
// With Config.ACLOverlap "filter" a filter that merely overlaps a deny rule
// is granted instead, as Mosquitto grants it, and every message sent to the
// client is checked against its rules ([Authenticator.ReadCheck],
// broker.ReadChecker): what it may not read is never sent.
//
// A shared subscription "$share/<name>/<filter>" is judged on <filter>, so
// "$share/g/secret/#" gets no more than "secret/#". A "share NAME" line
// (NAME may be a path.Match pattern such as "hist-*") reserves the share
// names it matches for the sections that list them: any other client is
// refused those groups, whatever its topic rules. Names no share line
// matches are open to everyone. The line is linemq's: Mosquitto 2 refuses
// a file that has one, so a file shared with Mosquitto must do without.
// (shared_subscriptions.groups[].allowed_clients in the configuration
// restricts groups by client id; the two apply together.)
//
// Substitutions follow Mosquitto: pattern rules only, anywhere in a level.
// A rule whose %u or %c cannot be filled in (an anonymous client's %u, or
// a name containing '/', '+' or '#', which would change the filter's shape)
// grants nothing, and as a deny rule denies as if the level were '+'.
//
// Differences from Mosquitto, all on the safe side: an unknown keyword is
// an error rather than skipped; a filter with a $share prefix in a rule is
// an error; without a password file a claimed user name gets the anonymous
// rules rather than that user's; and subscriptions are checked as a whole
// when made, where Mosquitto grants wide filters and drops messages later.
//
// # Reload
//
// [Authenticator.Reload] reads both files again (the gateway calls it on
// SIGHUP) and swaps the new rules in atomically; connected clients stay
// connected and are checked against the new rules from their next packet
// on, but keep the subscriptions they have. A file that does not parse
// leaves the old rules in force, and the error names file:line.
package auth
