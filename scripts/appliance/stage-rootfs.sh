#!/bin/sh
# stage-rootfs.sh DEST [BINARY]
#
# Lays out in DEST what the linemq package and the appliance overlay put
# into a root file system, at the same paths and with the same modes as the
# Buildroot package (buildroot/package/linemq/linemq.mk) and the overlay
# (buildroot/board/linemq/common/rootfs-overlay): the binary, the systemd
# unit, sysusers/tmpfiles/udev files, the factory configuration, then
# enables the units with systemctl's presets as Buildroot does.
# BINARY defaults to a placeholder script (enough for the unit checks).
set -eu

repo=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:?usage: stage-rootfs.sh DEST [BINARY]}
bin=${2:-}
overlay=$repo/buildroot/board/linemq/common/rootfs-overlay

mkdir -p "$dest"
if [ -n "$bin" ]; then
	install -D -m 0755 "$bin" "$dest/usr/bin/linemq"
else
	mkdir -p "$dest/usr/bin"
	printf '#!/bin/sh\necho "linemq placeholder"\n' >"$dest/usr/bin/linemq"
	chmod 0755 "$dest/usr/bin/linemq"
fi
# What linemq.mk installs.
install -D -m 0644 "$repo/systemd/linemq.service" "$dest/usr/lib/systemd/system/linemq.service"
install -D -m 0644 "$repo/systemd/linemq.sysusers" "$dest/usr/lib/sysusers.d/linemq.conf"
install -D -m 0644 "$repo/systemd/linemq.tmpfiles" "$dest/usr/lib/tmpfiles.d/linemq.conf"
install -D -m 0644 "$repo/systemd/60-linemq.rules" "$dest/usr/lib/udev/rules.d/60-linemq.rules"
install -D -m 0644 "$repo/docs/linemq.example.yaml" "$dest/usr/share/linemq/linemq.example.yaml"
mkdir -p "$dest/var/lib/linemq" "$dest/etc/linemq"
# The overlay, as BR2_ROOTFS_OVERLAY copies it (rsync -a: modes kept).
cp -a "$overlay/." "$dest/"
# The enablement Buildroot's systemd package does at the end of the build
# (systemctl --root=$(TARGET_DIR) preset-all).
systemctl --root="$dest" preset-all >/dev/null 2>&1 ||
	systemctl --root="$dest" enable linemq.service
