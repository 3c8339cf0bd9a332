#!/bin/bash
# powercut-test.sh BINARY [MODE...]
#
# Power cuts under emulation (docs/appliance.md, "Power cuts"). The arm64
# linemq boots under qemu-system-aarch64 -M virt (the kernel and busybox
# of appliance-test.sh, from the same cache) with its data partition on a
# virtio disk: an ext4 image file made on the host with mkfs.ext4 -d (no
# root needed), which the guest's init mounts at /var/lib/linemq. For each
# storage.sync mode (default: always, then batch), the host program
# scripts/appliance/powercut sends QoS 1 messages to persistent
# subscribers through the hostfwd port and kills QEMU with SIGKILL
# mid-traffic, POWERCUT_CUTS times (default 3), booting again from the disk
# the cut left after each; then every acknowledged message must reach every
# subscriber, and linemq.db must be healthy after every cut (checked on
# the host with e2fsck, debugfs and linemq db check on a copy of the
# image, and in the guest by linemq db check before linemq starts).
# The disk goes through QEMU's blklogwrites: at a "flushed" cut it keeps
# only the writes up to the guest's last completed flush (the log replayed
# on the image the boot started from), at a "kill" cut every write QEMU had
# issued. POWERCUT_DISK_MODEL: alternate (default: flushed, kill, flushed,
# ...), flushed or kill; POWERCUT_DISK_CACHE: writeback (default), none or
# unsafe; POWERCUT_APPEND: more kernel arguments (linemq.mount=OPTS adds
# ext4 mount options, e.g. barrier=0 for a control that must fail).
# Needs qemu-system-arm, e2fsprogs (mkfs.ext4, e2fsck, debugfs), cpio, Go;
# checked first (needs.sh). powercut-test.sh --needs only checks.
set -euo pipefail

"$(dirname "$0")/needs.sh" powercut-test \
	qemu-system-aarch64:qemu-system-arm mkfs.ext4:e2fsprogs e2fsck:e2fsprogs debugfs:e2fsprogs \
	cpio:cpio gzip:gzip dpkg:dpkg apt-get:apt
[ "${1-}" = --needs ] && exit 0

bin=$(realpath "${1:?usage: powercut-test.sh BINARY [MODE...]}")
shift
modes=(always batch)
[ $# -eq 0 ] || modes=("$@")
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${LINEMQ_APPLIANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/linemq-appliance}
cuts=${POWERCUT_CUTS:-3}
cachemode=${POWERCUT_DISK_CACHE:-writeback}
model=${POWERCUT_DISK_MODEL:-alternate}
extra=${POWERCUT_APPEND:-}
work=$(mktemp -d /tmp/linemq-powercut.XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
step() { echo "== $*"; }
fail() {
	echo "powercut-test: FAIL: $*"
	exit 1
}

# shellcheck source=guest-kernel.sh
. "$repo/scripts/appliance/guest-kernel.sh"
# virtio_blk and ext4 (a module in Debian's kernel, with what it needs) on
# top of what appliance-test.sh uses; the order is the load order.
mods=(failover net_failover virtio_mmio virtio_net virtio_blk crc16 mbcache jbd2 crc32c_generic ext4)
guest_kernel "$cache" "${GUEST_MODULES[@]}" || fail "no guest kernel"
step "kernel $(cat "$cache/kernel-package"), modules ${mods[*]}"

step "building the host side: scripts/appliance/powercut and linemq for the host (linemq db check)"
(cd "$repo" && go build -o "$work/powercut" ./scripts/appliance/powercut && go build -o "$work/linemq-host" ./cmd/linemq)

step "initramfs: busybox, modules, linemq; the init mounts /dev/vda (ext4) at /var/lib/linemq"
root=$work/root
mkdir -p "$root"/{bin,dev,proc,sys,tmp,run,etc/linemq,lib/modules,usr/bin,var/lib/linemq}
cp "$cache/busybox" "$root/bin/busybox"
for m in "${mods[@]}"; do cp "$cache/modules/$m.ko" "$root/lib/modules/"; done
install -m 0755 "$bin" "$root/usr/bin/linemq"
printf 'root:x:0:0:root:/:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
cat >"$root/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
for m in ${mods[*]}; do
	insmod /lib/modules/\$m.ko || echo "powercut-init: insmod \$m failed"
done
INIT
cat >>"$root/init" <<'INIT'
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
hostname linemq-qemu
i=0
while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
# The data partition, as fstab mounts it on the appliance (ext4 defaults:
# data=ordered, barriers on). Mounting replays the journal after a cut.
# linemq.mount=OPTS on the kernel command line adds mount options (the
# negative control: barrier=0).
mopts=$(sed -n 's/.*linemq\.mount=\([^ ]*\).*/\1/p' /proc/cmdline)
mount -t ext4 ${mopts:+-o $mopts} /dev/vda /var/lib/linemq || echo "powercut-init: mount /dev/vda failed"
echo "powercut-init: $(grep ' /var/lib/linemq ' /proc/mounts)"
sync=$(sed -n 's/.*linemq\.sync=\([a-z]*\).*/\1/p' /proc/cmdline)
cat >/etc/linemq/linemq.yaml <<EOF
data_dir: /var/lib/linemq
log_level: info
log_format: text
mqtt:
  listen: ":1883"
  max_queued_messages: 100000
http:
  listen: ":8080"
storage:
  sync: ${sync:-batch}
  batch_interval: 10ms
auth:
  allow_anonymous: true
EOF
if [ -f /var/lib/linemq/linemq.db ]; then
	if out=$(/usr/bin/linemq db check /var/lib/linemq/linemq.db 2>&1); then
		echo "powercut-init: db check: ok ($(ls -l /var/lib/linemq/linemq.db | awk '{print $5}') bytes)"
	else
		echo "powercut-init: db check: FAILED: $(echo "$out" | tr '\n' ' ')"
	fi
else
	echo "powercut-init: no linemq.db yet (first boot)"
fi
echo "powercut-init: storage.sync ${sync:-batch}, starting linemq"
/usr/bin/linemq -config /etc/linemq/linemq.yaml -data-dir /var/lib/linemq &
while true; do sleep 3600; done
INIT
chmod 0755 "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet) | gzip -1 >"$work/initrd.gz"
echo "  initrd $(du -h "$work/initrd.gz" | cut -f1)"

summary=()
t0=$SECONDS
for mode in "${modes[@]}"; do
	step "storage.sync: $mode: a fresh 64 MiB ext4 data image (mkfs.ext4 -d, no root), $cuts power cuts"
	mkdir -p "$work/data-$mode"
	mkfs.ext4 -q -F -b 4096 -L linemq-data -E root_owner=0:0 -d "$work/data-$mode" "$work/data-$mode.img" 64M
	rc=0
	"$work/powercut" -kernel "$cache/vmlinuz" -initrd "$work/initrd.gz" -image "$work/data-$mode.img" \
		-mode "$mode" -cuts "$cuts" -model "$model" -cache "$cachemode" -append "$extra" -linemq "$work/linemq-host" -work "$work" | tee "$work/out-$mode" || rc=$?
	summary+=("$(grep '^POWERCUT ' "$work/out-$mode" || echo "POWERCUT mode=$mode: no result")")
	[ $rc -eq 0 ] || fail "storage.sync $mode (see above)"
done
echo
for s in "${summary[@]}"; do echo "$s"; done
echo "powercut-test: every acknowledged message delivered after $cuts power cuts per mode (${modes[*]}), the database healthy after each; $((SECONDS - t0)) s"
