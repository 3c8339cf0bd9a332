#!/bin/sh
# BR2_ROOTFS_POST_BUILD_SCRIPT for every linemq board.
# $1: the target directory; $2: the board (BR2_ROOTFS_POST_SCRIPT_ARGS).
#
# The root file system stays read-only (the defconfigs leave
# BR2_TARGET_GENERIC_REMOUNT_ROOTFS_RW unset; /var is a tmpfs filled from
# /usr/share/factory). Two partitions are added to /etc/fstab:
#   - the FAT boot partition, read-only at /boot (linemq-config.service
#     remounts it read-write only to take the provisioning set from it).
#     nofail: a damaged boot partition must not stop the gateway; the
#     device gets 45 s, since linemq-config.service waits for the mount
#     (After=boot.mount) and a set missed at boot would leave the gateway
#     on its factory configuration (seen with 10 s under emulation);
#   - the ext4 data partition at /var/lib/linemq, the only place written
#     in normal operation.
set -eu

TARGET_DIR=${1:?usage: post-build.sh TARGET_DIR [BOARD]}
BOARD=${2:-}

mkdir -p "$TARGET_DIR/boot" "$TARGET_DIR/var/lib/linemq" "$TARGET_DIR/etc/linemq"

fstab=$TARGET_DIR/etc/fstab
touch "$fstab"
add_mount() {
	# $1: mount point; the rest: the fstab line
	mp=$1
	shift
	grep -qE "^[^#[:space:]]+[[:space:]]+${mp}[[:space:]]" "$fstab" || echo "$*" >>"$fstab"
}
add_mount / "/dev/root / auto ro 0 1"
add_mount /boot "LABEL=LINEMQBOOT /boot vfat ro,noatime,nofail,umask=0077,x-systemd.device-timeout=45s 0 2"
add_mount /var/lib/linemq "LABEL=linemq-data /var/lib/linemq ext4 rw,noatime,nosuid,nodev,noexec,errors=remount-ro,commit=5,x-systemd.growfs 0 2"

# The empty file dropbear's unit mounts the provisioned SSH keys over
# (git keeps no modes but the executable bit).
if [ -d "$TARGET_DIR/root/.ssh" ]; then
	chmod 0700 "$TARGET_DIR/root/.ssh"
	chmod 0600 "$TARGET_DIR/root/.ssh/authorized_keys"
fi

# The tryboot boards (their defconfig adds ../tryboot/rootfs-overlay):
# RAUC takes bundles made for this board only, signed by a certificate
# that chains to the plant's (LINEMQ_RAUC_CERT, PEM; docs/updates.md). An
# image whose updates nobody could sign is refused here rather than
# flashed.
rauc_conf=$TARGET_DIR/etc/rauc/system.conf
if [ -f "$rauc_conf" ]; then
	[ -n "$BOARD" ] || { echo "post-build.sh: RAUC's system.conf needs the board (BR2_ROOTFS_POST_SCRIPT_ARGS)"; exit 1; }
	sed -i "s/^compatible=.*/compatible=linemq-$BOARD/" "$rauc_conf"
	if [ -z "${LINEMQ_RAUC_CERT:-}" ] || [ ! -f "$LINEMQ_RAUC_CERT" ]; then
		echo "post-build.sh: $BOARD installs root file system updates with RAUC: set LINEMQ_RAUC_CERT to the PEM certificate (or CA) its bundles are signed with (docs/updates.md)${LINEMQ_RAUC_CERT:+; $LINEMQ_RAUC_CERT is not a file}"
		exit 1
	fi
	grep -q -- '-----BEGIN CERTIFICATE-----' "$LINEMQ_RAUC_CERT" ||
		{ echo "post-build.sh: LINEMQ_RAUC_CERT=$LINEMQ_RAUC_CERT holds no PEM certificate"; exit 1; }
	install -D -m 0644 "$LINEMQ_RAUC_CERT" "$TARGET_DIR/etc/rauc/keyring.pem"
fi
