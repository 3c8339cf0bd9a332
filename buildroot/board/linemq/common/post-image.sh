#!/bin/bash
# BR2_ROOTFS_POST_IMAGE_SCRIPT for every linemq board.
# $1: the images directory; $2: the board (BR2_ROOTFS_POST_SCRIPT_ARGS).
#
# Writes sdcard.img with genimage: a FAT boot partition (the firmware,
# kernel and device trees on a Raspberry Pi, and linemq.yaml, the
# gateway's own settings, editable on any PC), the read-only ext4 root
# (rootfs.ext4, built by Buildroot) and an empty ext4 data partition for
# /var/lib/linemq (LINEMQ_DATA_SIZE, default 256M; the file system grows to
# the partition at boot, x-systemd.growfs).
#
# A board whose root file system carries RAUC's system.conf (the tryboot
# overlay: Raspberry Pi 4/5) gets the A/B card of ../tryboot/genimage.cfg.in
# instead: autoboot.txt and linemq.yaml on partition 1, two firmware
# partitions and two roots. And when LINEMQ_RAUC_KEY and LINEMQ_RAUC_CERT
# name the signing key and its certificate (PEM), the update of this build,
# linemq-os-BOARD-VERSION.raucb, signed for RAUC (LINEMQ_OS_VERSION,
# default the build's UTC time). The key may live elsewhere: without it
# the card is made and the bundle is not, saying so.
set -euo pipefail

BINARIES_DIR=${1:?usage: post-image.sh BINARIES_DIR BOARD}
BOARD=${2:?usage: post-image.sh BINARIES_DIR BOARD}
COMMON_DIR=$(cd "$(dirname "$0")" && pwd)
GENIMAGE_CFG=$BINARIES_DIR/genimage.cfg
GENIMAGE_TMP=${BUILD_DIR:-$BINARIES_DIR}/genimage.tmp
DATA_SIZE=${LINEMQ_DATA_SIZE:-256M}

[ -d "$COMMON_DIR/../$BOARD" ] || { echo "post-image.sh: unknown board $BOARD"; exit 1; }

# The gateway's own settings: applied at the first boot (and whenever a
# new one is put there) by linemq-config.service.
install -m 0644 "$COMMON_DIR/boot-linemq.yaml" "$BINARIES_DIR/linemq.yaml"

TRYBOOT=
if [ -f "${TARGET_DIR:-}/etc/rauc/system.conf" ]; then
	TRYBOOT=$COMMON_DIR/../tryboot
fi

# The firmware partition's files: on a Raspberry Pi the firmware, the
# device trees and the kernel config.txt names.
FIRMWARE=()
if [ -d "$BINARIES_DIR/rpi-firmware" ]; then
	for i in "$BINARIES_DIR"/*.dtb "$BINARIES_DIR"/rpi-firmware/*; do
		[ -e "$i" ] || continue
		# On the A/B card each slot has its own cmdline.txt (below).
		[ -n "$TRYBOOT" ] && [ "${i##*/}" = cmdline.txt ] && continue
		FIRMWARE+=("${i#"$BINARIES_DIR"/}")
	done
	KERNEL=$(sed -n 's/^kernel=//p' "$BINARIES_DIR/rpi-firmware/config.txt")
	FIRMWARE+=("${KERNEL:-Image}")
elif [ -e "$BINARIES_DIR/Image" ]; then
	# QEMU boots the kernel with -kernel; a copy on the boot partition
	# keeps the layout the same as on a Pi.
	FIRMWARE+=(Image)
fi

if [ -n "$TRYBOOT" ]; then
	[ -f "$BINARIES_DIR/rpi-firmware/cmdline.txt" ] ||
		{ echo "post-image.sh: $BOARD: the A/B card needs rpi-firmware/cmdline.txt"; exit 1; }
	install -m 0644 "$TRYBOOT/autoboot.txt" "$BINARIES_DIR/autoboot.txt"
	# Slot A boots partition 5, slot B partition 6; rauc.slot= tells RAUC
	# which one is running. RAUC's post-install handler makes the same
	# change on the device when it writes a slot.
	FIX=$TRYBOOT/rootfs-overlay/usr/libexec/linemq/rauc-post-install
	cp "$BINARIES_DIR/rpi-firmware/cmdline.txt" "$BINARIES_DIR/cmdline-a.txt"
	cp "$BINARIES_DIR/rpi-firmware/cmdline.txt" "$BINARIES_DIR/cmdline-b.txt"
	sh "$FIX" --fix-cmdline "$BINARIES_DIR/cmdline-a.txt" /dev/mmcblk0p5 A
	sh "$FIX" --fix-cmdline "$BINARIES_DIR/cmdline-b.txt" /dev/mmcblk0p6 B
	TEMPLATE=$TRYBOOT/genimage.cfg.in
	LIST=$(printf '\\t\\t\\t"%s",\\n' "${FIRMWARE[@]}")
	sed -e "s|#FIRMWARE_FILES#|${LIST}|" -e "s|#DATA_SIZE#|${DATA_SIZE}|" "$TEMPLATE" >"$GENIMAGE_CFG"
else
	FILES=(linemq.yaml "${FIRMWARE[@]}")
	BOOT_FILES=$(printf '\\t\\t\\t"%s",\\n' "${FILES[@]}")
	sed -e "s|#BOOT_FILES#|${BOOT_FILES}|" -e "s|#DATA_SIZE#|${DATA_SIZE}|" \
		"$COMMON_DIR/genimage.cfg.in" >"$GENIMAGE_CFG"
fi

# An empty root path: rootfs.ext4 is already built, and the data
# partition starts empty.
ROOTPATH_TMP=$(mktemp -d)
trap 'rm -rf "$ROOTPATH_TMP"' EXIT
rm -rf "$GENIMAGE_TMP"

genimage \
	--rootpath "$ROOTPATH_TMP" \
	--tmppath "$GENIMAGE_TMP" \
	--inputpath "$BINARIES_DIR" \
	--outputpath "$BINARIES_DIR" \
	--config "$GENIMAGE_CFG"

[ -n "$TRYBOOT" ] || exit 0

# The update of this build for RAUC: the root file system and slot A's
# firmware partition (the post-install handler points a slot B copy at
# its own root), in a verity bundle signed with the plant's key.
if [ -z "${LINEMQ_RAUC_KEY:-}" ] || [ -z "${LINEMQ_RAUC_CERT:-}" ]; then
	echo "post-image.sh: no RAUC bundle: set LINEMQ_RAUC_KEY and LINEMQ_RAUC_CERT (PEM) to sign one (docs/updates.md)"
	exit 0
fi
RAUC=rauc
[ -x "${HOST_DIR:-/nonexistent}/bin/rauc" ] && RAUC=$HOST_DIR/bin/rauc
COMPATIBLE=$(sed -n 's/^compatible=//p' "$TARGET_DIR/etc/rauc/system.conf")
VERSION=${LINEMQ_OS_VERSION:-$(date -u +%Y.%m.%d-%H%M)}
BUNDLE_DIR=$(mktemp -d)
trap 'rm -rf "$ROOTPATH_TMP" "$BUNDLE_DIR"' EXIT
cp "$BINARIES_DIR/rootfs.ext4" "$BUNDLE_DIR/rootfs.ext4"
cp "$BINARIES_DIR/firmware-a.vfat" "$BUNDLE_DIR/firmware.vfat"
cat >"$BUNDLE_DIR/manifest.raucm" <<MANIFEST
[update]
compatible=$COMPATIBLE
version=$VERSION
description=linemq appliance ($BOARD)

[bundle]
format=verity

[image.rootfs]
filename=rootfs.ext4

[image.boot]
filename=firmware.vfat
MANIFEST
OUT=$BINARIES_DIR/linemq-os-$BOARD-$VERSION.raucb
rm -f "$OUT"
"$RAUC" bundle --cert="$LINEMQ_RAUC_CERT" --key="$LINEMQ_RAUC_KEY" "$BUNDLE_DIR" "$OUT"
echo "post-image.sh: $OUT"
