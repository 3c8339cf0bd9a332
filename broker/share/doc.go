// Package share implements MQTT shared-subscription groups
// ($share/<name>/<filter>): the members of one group and the choice of the
// single member that receives each matching message.
//
// # Model
//
// A [Group] holds its members in the order they joined. From that it derives
// a candidate list: the members whose sessions are on this node first, then
// the members on other nodes, each part in join order. The broker calls
// [Group.Pick] once per message and group, on the node where the message was
// published only, passing an accept function that tells Pick whether a
// candidate can take the message right now ([Take]), could take it but its
// send window is full ([Full]), or cannot take it at all ([Skip]).
//
// Pick asks candidates in the strategy's order and stops at the first Take.
// It never asks a candidate twice and never goes round the group more than
// once, so its cost is bounded by the group size even when members are
// failing. A departed member the broker has not removed yet keeps its turns,
// and each falls through to the next candidate: nothing is lost, but that
// neighbour receives more than its share for a while. With
// [Options].SkipFull, a member with a full window is passed over while any
// other member has room, and gets the message only if nobody does; without
// it the rotation ignores windows. Pick reports false only when every member
// answered Skip.
//
// # Strategies
//
// RoundRobin ("round_robin", the default) starts each message one position
// further along the candidate list. The cursor belongs to this node alone,
// which keeps any cluster-wide agreement out of the publish path. Messages
// published on one node rotate exactly over the whole group; messages
// published on several nodes even out only over time, since each node has
// its own order and position. Load follows members, not nodes: each member
// receives the same share wherever it is connected.
//
// Random ("random") starts each message at a random candidate. It spreads
// load like round robin without any state worth reasoning about, but short
// runs are less even. A member that is passed over hands its turn to the
// candidate after it, as in round robin.
//
// Sticky ("sticky") sends everything to one member, chosen by rotation the
// first time, until that member leaves or answers Skip; then the member that
// took the message instead becomes the sticky one. A Full sticky member keeps
// its position (with SkipFull that one message goes elsewhere). Sticky suits
// an active/standby pair and makes no attempt to spread load. The choice is
// per node, so two nodes may stick to different members.
//
// HashClientID ("hash_clientid") and HashTopic ("hash_topic") give each
// publisher, or each topic name, a fixed owner while the membership is
// stable, which keeps that key's messages in order on one member and lets
// members cache per-key state. They use rendezvous (highest random weight)
// hashing: every member scores every key, the highest score wins, and the
// scores depend only on the member IDs and the key. Consequences: all nodes
// agree on a key's owner; when a member leaves only its keys move, spread
// over the remaining members; when a member joins it takes about 1/n of the
// keys and no other key moves; and when the owner cannot take a message, the
// next in line is the member that would own the key if the owner left. The
// price is balance: traffic is only as even as the keys, and more members
// cannot dilute one hot key.
//
// PreferLocal ("prefer_local") rotates over this node's members and turns to
// members on other nodes only when none of the local ones can take the
// message (all Skip, or all Full with SkipFull), rotating over those with a
// separate cursor. It saves the hop between nodes, at the risk that members
// on a node many publishers use are busy while others idle. With all
// members on one node it behaves exactly like RoundRobin.
//
// # Use
//
// A Group is not safe for concurrent use; the broker holds a lock around
// it. In return Pick reuses scratch space kept in the Group and does not
// allocate. Join and Leave rebuild the candidate list, which is linear in
// the group size; Pick only reads it.
//
// The Random strategy's default source is a generator seeded from the group
// name and filter, so tests and replays are reproducible; [Options].Rand
// replaces it.
//
// This package depends on the standard library only.
package share
