// Package update reads, writes and verifies linemq's signed update bundles
// (docs/updates.md).
//
// # The bundle
//
// A bundle is a gzip-compressed tar archive, so that `tar tzvf` shows what
// is inside, holding, in this order:
//
//	manifest.json   what the bundle is: format, version, architecture, and
//	                the name, size, mode and SHA-256 of every file after it
//	manifest.sig    the ed25519 signature of manifest.json (64 bytes)
//	linemq          the files the manifest lists, in its order
//
// The signature covers the manifest and the manifest covers every byte of
// the files, so one signature check and one hash per file prove the
// whole. The signature comes before the files so that a bundle signed by
// no trusted key is refused before anything of it is written, and a
// reader checks each file's size and hash as it streams it: a truncated,
// padded or altered bundle is refused with the entry and what differs.
//
// # Keys
//
// Bundles are signed with an ed25519 private key kept off the gateways
// (linemq update keygen writes a pair, PKCS #8 and PKIX PEM). A gateway
// trusts the public keys in its keys directory (update.keys_dir,
// /etc/linemq/update-keys: the image's or the provisioning set's).
package update
