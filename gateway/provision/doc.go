// Package provision applies a provisioning set: the files that turn a
// freshly flashed gateway into this plant's gateway, put on the card's
// boot partition from any PC (docs/appliance.md, "From a blank card to a
// secured gateway").
//
// # The set
//
// linemq.yaml at the top of the boot partition, and beside it a folder
// linemq/ holding any of:
//
//	passwd                       the MQTT users (Mosquitto's format; linemq passwd)
//	acl                          what they may do
//	tls/server.crt, server.key   the TLS listeners' certificate and key
//	tls/ca.crt, tls/crl.pem      client CAs and their revocation list
//	cluster/mesh.crt, mesh.key   this gateway's certificate between gateways
//	cluster/etcd.crt, etcd.key   its embedded etcd member's
//	cluster/ca.crt, crl.pem      the line's CA and its revocation list
//	update-keys/*.pub            public keys trusted to sign update bundles
//	network/*.network            systemd-networkd's own format (DHCP without one)
//	hostname                     the host name
//	ntp.txt                      NTP servers, one per line
//	authorized_keys              SSH keys (dropbear starts only with them)
//
// The linemq files land in the configuration directory under the same
// names (linemq sees it as /etc/linemq, so linemq.yaml names
// /etc/linemq/passwd, /etc/linemq/tls/server.crt, ...); the system's in
// its system/ folder, which the boot script hands to networkd, timesyncd,
// the host name and dropbear.
//
// # All or nothing
//
// [Check] validates the whole set against the configuration it would
// make: every file parses (the configuration is checked with its
// /etc/linemq paths pointing at the new files), keys match their
// certificates, revocation lists come from their CA. [Apply] changes
// nothing unless Check finds nothing wrong; then it writes the new
// configuration directory beside the old one, makes it durable, and
// swaps the two with renames, so that a power cut leaves the old set or
// the new one, never a mixture. The applied files are then deleted from
// the boot partition (a FAT file system anyone who pulls the card can
// read), and a [Status] records the outcome, which the gateway shows on
// its page, in its health and on its status LED.
package provision
