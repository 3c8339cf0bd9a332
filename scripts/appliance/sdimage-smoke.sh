#!/bin/bash
# sdimage-smoke.sh BINARY [BOARD]
#
# Assembles the appliance's SD card image the way a Buildroot build does,
# without Buildroot and without a kernel, then opens it up to prove the
# layout, the files and their modes:
#   1. stage-rootfs.sh lays out the package and the overlay (the
#      cross-compiled arm64 BINARY, the units, the factory configuration)
#      and enables the units with systemctl's presets;
#   2. the board's post-build.sh (fstab, mount points, host name);
#   3. the configurations are checked with the real binary;
#   4. rootfs.ext4 with mkfs.ext4 -d, as Buildroot's ext2 rootfs does;
#      rpi-firmware/config.txt and cmdline.txt from the board directory,
#      placeholder kernel and device tree;
#   5. the board's post-image.sh (genimage) writes sdcard.img;
#   6. the partition table is read from the MBR; the FAT partition is read
#      with mtools, the ext4 ones with debugfs.
# A board whose defconfig adds the tryboot overlay (Raspberry Pi 4/5) gets
# the A/B card (buildroot/board/linemq/tryboot): the overlay is laid out
# too, a throwaway certificate authority stands in for the plant's, and
# besides the card's seven partitions the RAUC bundle post-image.sh signs
# is checked with Debian's rauc: accepted with the plant's keyring and the
# image's system.conf, refused with another's.
# Needs genimage, mtools, dosfstools, e2fsprogs, systemd (systemctl)
# (Debian packages) and qemu-user-static to run the ARM binary, and for the
# A/B boards rauc, squashfs-tools and openssl; checked first (needs.sh).
# sdimage-smoke.sh --needs only checks.
set -euo pipefail

"$(dirname "$0")/needs.sh" sdimage-smoke \
	genimage:genimage mkfs.vfat:dosfstools mcopy:mtools minfo:mtools mdir:mtools mtype:mtools mlabel:mtools \
	mkfs.ext4:e2fsprogs mke2fs:e2fsprogs debugfs:e2fsprogs dumpe2fs:e2fsprogs \
	systemctl:systemd qemu-aarch64-static:qemu-user-static \
	rauc:rauc mksquashfs:squashfs-tools openssl:openssl
[ "${1-}" = --needs ] && exit 0

bin=$(realpath "${1:?usage: sdimage-smoke.sh BINARY [BOARD]}")
board=${2:-rpi4_64}
repo=$(cd "$(dirname "$0")/../.." && pwd)
here=$repo/scripts/appliance
common=$repo/buildroot/board/linemq/common
work=$(mktemp -d /tmp/linemq-sdimage.XXXXXX)
trap 'rm -rf "$work"' EXIT
target=$work/target
images=$work/images
mkdir -p "$images"
failures=0
ok() { printf '  ok   %s\n' "$*"; }
bad() { printf '  FAIL %s\n' "$*"; failures=$((failures + 1)); }
expect() { # description, then a command that must succeed
	local what=$1
	shift
	if "$@" >/dev/null 2>&1; then ok "$what"; else bad "$what"; fi
}

echo "== staging the root file system ($board)"
"$here/stage-rootfs.sh" "$target" "$bin"
# What Buildroot's skeleton and LINEMQ_USERS put in /etc/passwd and
# /etc/group (mkusers; uids from the system range).
cat >"$target/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
linemq:x:999:999:linemq MQTT broker:/:/bin/false
PASSWD
cat >"$target/etc/group" <<'GROUP'
root:x:0:
linemq:x:999:
gpio:x:998:linemq
GROUP
# The board's other overlays, as its defconfig lists them.
defconfig=$repo/buildroot/configs/linemq_${board}_defconfig
tryboot=
# shellcheck disable=SC2013 # BR2_ROOTFS_OVERLAY is a list of words
for o in $(sed -n 's/^BR2_ROOTFS_OVERLAY="\(.*\)"$/\1/p' "$defconfig" 2>/dev/null); do
	o=${o//\$(BR2_EXTERNAL_LINEMQ_PATH)/$repo/buildroot}
	case $o in */common/rootfs-overlay) continue ;; */tryboot/rootfs-overlay) tryboot=1 ;; esac
	cp -a "$o/." "$target/"
done
if [ -n "$tryboot" ]; then
	systemctl --root="$target" preset-all >/dev/null 2>&1
	# The plant's certificate authority, and a stranger's.
	for who in plant stranger; do
		openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/O=$who/CN=$who linemq updates" \
			-keyout "$work/$who.key" -out "$work/$who.pem" >/dev/null 2>&1
	done
	export LINEMQ_RAUC_CERT=$work/plant.pem LINEMQ_RAUC_KEY=$work/plant.key LINEMQ_OS_VERSION=2026.12.0
	# post-build.sh refuses to make an image whose updates nobody could sign.
	if env -u LINEMQ_RAUC_CERT "$common/post-build.sh" "$target" "$board" >"$work/nocert.out" 2>&1; then
		bad "post-build.sh made a RAUC image without LINEMQ_RAUC_CERT"
	else
		expect "without LINEMQ_RAUC_CERT post-build.sh stops, naming it: $(cat "$work/nocert.out")" grep -q LINEMQ_RAUC_CERT "$work/nocert.out"
	fi
fi
"$common/post-build.sh" "$target" "$board"

echo "== configurations checked with linemq itself"
"$here/check-config.sh" "$bin" "$target/etc/linemq/linemq.yaml" "$common/boot-linemq.yaml"

echo "== images"
mkfs.ext4 -q -F -L linemq-root -d "$target" "$images/rootfs.ext4" 96M
mkdir -p "$images/rpi-firmware"
if [ -f "$repo/buildroot/board/linemq/$board/config.txt" ]; then
	cp "$repo/buildroot/board/linemq/$board/config.txt" "$repo/buildroot/board/linemq/$board/cmdline.txt" "$images/rpi-firmware/"
	echo "placeholder device tree" >"$images/bcm2711-rpi-4-b.dtb"
else
	rmdir "$images/rpi-firmware"
fi
echo "placeholder kernel (sdimage-smoke builds no kernel)" >"$images/Image"
LINEMQ_DATA_SIZE=64M BUILD_DIR=$work TARGET_DIR=$target "$common/post-image.sh" "$images" "$board" >"$work/genimage.log" 2>&1 ||
	{ cat "$work/genimage.log"; exit 1; }
img=$images/sdcard.img
echo "$img: $(du -h --apparent-size "$img" | cut -f1)"

if [ -n "$tryboot" ]; then
	# shellcheck source=sdimage-tryboot.sh
	. "$here/sdimage-tryboot.sh"
	exit
fi

echo "== partition table (MBR)"
declare -a ptype pstart psize
for i in 0 1 2 3; do
	off=$((446 + 16 * i))
	ptype[i]=$(od -An -tx1 -j $((off + 4)) -N1 "$img" | tr -d ' ')
	pstart[i]=$(od -An -tu4 -j $((off + 8)) -N4 "$img" | tr -d ' ')
	psize[i]=$(od -An -tu4 -j $((off + 12)) -N4 "$img" | tr -d ' ')
	boot=$(od -An -tx1 -j "$off" -N1 "$img" | tr -d ' ')
	[ "${ptype[i]}" = 00 ] && continue
	printf '  p%d type 0x%s%s start %8d size %8d sectors (%d MiB)\n' $((i + 1)) "${ptype[i]}" \
		"$([ "$boot" = 80 ] && echo ' boot')" "${pstart[i]}" "${psize[i]}" $((psize[i] / 2048))
done
expect "p1 is FAT32 LBA (0x0c), p2 and p3 Linux (0x83), no p4" \
	test "${ptype[0]} ${ptype[1]} ${ptype[2]} ${ptype[3]}" = "0c 83 83 00"
part() { dd if="$img" of="$work/p$1" bs=512 skip="${pstart[$1 - 1]}" count="${psize[$1 - 1]}" status=none; }
part 1
part 2
part 3

echo "== p1: boot (vfat, mtools)"
export MTOOLS_SKIP_CHECK=1
minfo -i "$work/p1" :: >"$work/minfo" 2>&1 || true
label=$(sed -n 's/^ *volume label=\(.*\)$/\1/p; s/.*Volume label is \(.*\)$/\1/p' "$work/minfo" | head -1 | tr -d ' ')
[ -n "$label" ] || label=$(mlabel -i "$work/p1" -s :: 2>/dev/null | sed 's/.*is //' | tr -d ' ')
expect "label LINEMQBOOT (got $label)" test "$label" = LINEMQBOOT
mdir -i "$work/p1" -b :: | sed 's|^::/|  |' | sort
for f in linemq.yaml Image; do
	expect "boot has $f" mtype -i "$work/p1" "::$f"
done
if [ -d "$images/rpi-firmware" ]; then
	for f in config.txt cmdline.txt; do
		expect "boot has $f" mtype -i "$work/p1" "::$f"
	done
	mtype -i "$work/p1" ::cmdline.txt >"$work/cmdline.txt"
	expect "cmdline.txt mounts the root read-only (ro)" grep -qw ro "$work/cmdline.txt"
	mtype -i "$work/p1" ::config.txt >"$work/config.txt"
	expect "config.txt enables the SoC watchdog" grep -qx 'dtparam=watchdog=on' "$work/config.txt"
fi
mcopy -i "$work/p1" ::linemq.yaml "$work/boot-linemq.yaml"
"$here/check-config.sh" "$bin" "$work/boot-linemq.yaml" | sed 's/^/  /'

echo "== p2: root (ext4, debugfs)"
dbg() { debugfs -R "$1" "$work/p2" 2>/dev/null; }
expect "label linemq-root" test "$(dumpe2fs -h "$work/p2" 2>/dev/null | sed -n 's/^Filesystem volume name: *//p')" = linemq-root
mode() { dbg "stat $1" | sed -n 's/.*Mode: *\([0-7]*\).*/\1/p' | head -1; }
typ() { dbg "stat $1" | sed -n 's/^Inode: .*Type: \([a-z]*\).*/\1/p' | head -1; }
check_file() { # path mode
	local m t
	m=$(mode "$1")
	t=$(typ "$1")
	if [ "$t" = regular ] && [ "$m" = "$2" ]; then ok "$1 $m"; else bad "$1: want a file with mode $2, got ${t:-nothing} ${m}"; fi
}
check_file /usr/bin/linemq 0755
check_file /usr/lib/systemd/system/linemq.service 0644
check_file /usr/lib/systemd/system/linemq-config.service 0644
check_file /usr/lib/systemd/system/linemq.service.d/appliance.conf 0644
check_file /usr/lib/systemd/system-preset/80-linemq.preset 0644
check_file /usr/lib/sysusers.d/linemq.conf 0644
check_file /usr/lib/tmpfiles.d/linemq.conf 0644
check_file /usr/lib/tmpfiles.d/linemq-appliance.conf 0644
check_file /usr/lib/systemd/journald.conf.d/10-linemq.conf 0644
check_file /usr/lib/udev/rules.d/60-linemq.rules 0644
check_file /usr/libexec/linemq/apply-config 0755
check_file /usr/share/linemq/linemq.example.yaml 0644
check_file /etc/linemq/linemq.yaml 0644
check_file /etc/systemd/system.conf.d/10-linemq-watchdog.conf 0644
check_file /etc/fstab 0644
link=$(dbg "stat /etc/systemd/system/multi-user.target.wants/linemq.service" | sed -n 's/^Fast link dest: "\(.*\)"/\1/p')
expect "linemq.service enabled (multi-user.target.wants -> $link)" test "$link" = /usr/lib/systemd/system/linemq.service
for d in /boot /var/lib/linemq /etc/linemq; do
	expect "mount point $d" test "$(typ "$d")" = directory
done
dbg "cat /etc/fstab" >"$work/fstab"
sed 's/^/  | /' "$work/fstab"
expect "fstab: root read-only" grep -Eq '^/dev/root +/ +auto +ro ' "$work/fstab"
expect "fstab: boot partition (LABEL=LINEMQBOOT) read-only at /boot" grep -Eq '^LABEL=LINEMQBOOT +/boot +vfat +ro,' "$work/fstab"
expect "fstab: data partition (LABEL=linemq-data) at /var/lib/linemq" grep -Eq '^LABEL=linemq-data +/var/lib/linemq +ext4 +rw,' "$work/fstab"
dbg "cat /etc/systemd/system.conf.d/10-linemq-watchdog.conf" >"$work/wd.conf"
expect "systemd drives the SoC watchdog: RuntimeWatchdogSec=15s" grep -qx 'RuntimeWatchdogSec=15s' "$work/wd.conf"
dbg "cat /usr/lib/systemd/system/linemq.service" >"$work/linemq.service"
for k in Type=notify WatchdogSec=30s Restart=on-failure ProtectSystem=strict DevicePolicy=closed StateDirectory=linemq \
	'ExecStart=/usr/bin/linemq -config /etc/linemq/linemq.yaml -data-dir /var/lib/linemq'; do
	expect "linemq.service: $k" grep -qxF "$k" "$work/linemq.service"
done
dbg "dump /usr/bin/linemq $work/linemq" >/dev/null
chmod 0755 "$work/linemq"
v=$(qemu-aarch64-static "$work/linemq" -version 2>&1 || true)
expect "the image's /usr/bin/linemq runs: $v" cmp -s "$work/linemq" "$bin"

echo "== p3: data (ext4, debugfs)"
d3() { debugfs -R "$1" "$work/p3" 2>/dev/null; }
expect "label linemq-data" test "$(dumpe2fs -h "$work/p3" 2>/dev/null | sed -n 's/^Filesystem volume name: *//p')" = linemq-data
entries=$(d3 "ls -p /" | awk -F/ 'NF > 5 && $6 != "." && $6 != ".." { print $6 }' | tr '\n' ' ')
expect "empty (${entries:-nothing but . and ..})" test "$entries" = "lost+found "
expect "no reserved blocks (-m 0)" test "$(dumpe2fs -h "$work/p3" 2>/dev/null | sed -n 's/^Reserved block count: *//p')" = 0

echo
if [ "$failures" -ne 0 ]; then
	echo "sdimage-smoke: $failures check(s) failed"
	exit 1
fi
echo "sdimage-smoke: $board image layout, files and modes as specified"
