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

FILES=(linemq.yaml)
if [ -d "$BINARIES_DIR/rpi-firmware" ]; then
	for i in "$BINARIES_DIR"/*.dtb "$BINARIES_DIR"/rpi-firmware/*; do
		[ -e "$i" ] && FILES+=("${i#"$BINARIES_DIR"/}")
	done
	KERNEL=$(sed -n 's/^kernel=//p' "$BINARIES_DIR/rpi-firmware/config.txt")
	FILES+=("${KERNEL:-Image}")
elif [ -e "$BINARIES_DIR/Image" ]; then
	# QEMU boots the kernel with -kernel; a copy on the boot partition
	# keeps the layout the same as on a Pi.
	FILES+=(Image)
fi
BOOT_FILES=$(printf '\\t\\t\\t"%s",\\n' "${FILES[@]}")
sed -e "s|#BOOT_FILES#|${BOOT_FILES}|" -e "s|#DATA_SIZE#|${DATA_SIZE}|" \
	"$COMMON_DIR/genimage.cfg.in" >"$GENIMAGE_CFG"

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
