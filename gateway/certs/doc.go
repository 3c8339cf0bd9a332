// Package certs holds what the gateway's TLS endpoints share about their
// files: noticing that certificate, key, CA or CRL files changed on disk,
// revocation lists checked against a verified chain, and a mutual-TLS
// configuration whose certificate and authorities can be replaced while
// connections made with the old ones carry on.
//
// # Rotation
//
// A [Watcher] looks at its files' stamps (size, modification and change
// times, inode) every interval and calls back once they differ from those
// last loaded and have stayed the same for one whole interval: a
// certificate written in several steps, or a key replaced a moment after
// its certificate, is loaded once, complete, rather than failing half way.
// With the default interval of 250 ms new material is in force within
// half a second of the last write. Files replaced by a rename (as
// provisioning tools and Kubernetes-style symbolic links do) are seen as
// well, since the stamp follows the path.
//
// # Revocation
//
// A [CRL] is one or more PEM revocation lists, each checked against the
// certificate authorities it must come from when it is loaded: a list
// that no authority in the CA file signed is refused, naming the file. A
// chain is revoked when any of its certificates below the root is listed
// by its issuer. A list past its next update stays in force (refusing
// every client because a list went stale would stop the plant for a
// clerical delay); [CRL.Stale] says so, for the log.
package certs
