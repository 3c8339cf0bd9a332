// Package sparkplug makes a gateway a Sparkplug B Aware server (Eclipse
// Sparkplug 3.0, section 10.1.4) and a watcher of every edge node's health.
//
// It sits beside the broker as a broker.Observer: the broker shows it each
// message once, where the message enters the node, and it reads the
// messages on spBv1.0/ topics (and the primary hosts' STATE) just enough to
// keep, per edge node, whether it is online, the bdSeq of its birth and of
// its will, sequence gaps, births, deaths, devices and rates. It republishes
// every NBIRTH and DBIRTH, retained, under $sparkplug/certificates/, and can
// ask an edge node for a rebirth.
//
// On a line, every node registers a route for spBv1.0/# so that every
// Sparkplug message reaches every node once; each node keeps the same state
// and writes the same certificates from what it sees, so a gateway that dies
// takes nothing of it away. Messages that are an earlier session's (an
// NDEATH carrying the bdSeq of one of the last births but not the current
// one, or messages entering at another gateway than the current birth did,
// moments after it) are held back, so that a subscriber never sees a
// session's messages mixed with the next one's.
//
// Payloads that are not Sparkplug (bad protobuf, a missing sequence number)
// pass through untouched and are counted.
package sparkplug
