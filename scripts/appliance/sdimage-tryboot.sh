# shellcheck shell=bash
# shellcheck disable=SC2154 # img, work, images, repo, board, bin, here: sdimage-smoke.sh's
# sdimage-tryboot.sh: the checks sdimage-smoke.sh makes of the A/B card of
# a tryboot board (sourced by it; its variables and ok/bad/expect in
# scope): the seven partitions, what each holds, and the RAUC bundle
# post-image.sh signed.

echo "== partition table (MBR, then the extended partition's chain of EBRs)"
u32() { od -An -tu4 -j "$2" -N4 "$1" | tr -d ' '; }
x8() { od -An -tx1 -j "$2" -N1 "$1" | tr -d ' '; }
declare -a ptype pstart psize
for i in 0 1 2 3; do
	off=$((446 + 16 * i))
	ptype[i]=$(x8 "$img" $((off + 4)))
	pstart[i]=$(u32 "$img" $((off + 8)))
	psize[i]=$(u32 "$img" $((off + 12)))
done
ext=${pstart[3]}
ebr=$ext
i=4
while [ "$i" -lt 12 ]; do
	base=$((ebr * 512 + 446))
	ptype[i]=$(x8 "$img" $((base + 4)))
	pstart[i]=$((ebr + $(u32 "$img" $((base + 8)))))
	psize[i]=$(u32 "$img" $((base + 12)))
	next=$(u32 "$img" $((base + 16 + 8)))
	i=$((i + 1))
	[ "$next" -ne 0 ] || break
	ebr=$((ext + next))
done
n=$i
for ((i = 0; i < n; i++)); do
	[ "${ptype[i]}" = 00 ] && continue
	printf '  p%d type 0x%s start %8d size %8d sectors (%d MiB)\n' $((i + 1)) "${ptype[i]}" "${pstart[i]}" "${psize[i]}" $((psize[i] / 2048))
done
types=$(for ((i = 0; i < n; i++)); do printf '%s ' "${ptype[i]}"; done)
expect "p1-p3 FAT (0x0c), p4 extended, p5-p7 Linux (0x83) (got $types)" \
	test "${types% }" = "0c 0c 0c 0f 83 83 83"
part() { dd if="$img" of="$work/p$1" bs=512 skip="${pstart[$1 - 1]}" count="${psize[$1 - 1]}" status=none; }
for p in 1 2 3 5 6 7; do part $p; done
export MTOOLS_SKIP_CHECK=1
fatlabel() { mlabel -i "$1" -s :: 2>/dev/null | sed 's/.*is //' | tr -d ' '; }

echo "== p1: LINEMQBOOT (vfat): autoboot.txt and the gateway's settings"
expect "label LINEMQBOOT (got $(fatlabel "$work/p1"))" test "$(fatlabel "$work/p1")" = LINEMQBOOT
mdir -i "$work/p1" -b :: | sed 's|^::/|  |' | sort
mtype -i "$work/p1" ::autoboot.txt | tr -d '\r' >"$work/autoboot.txt"
sed 's/^/  | /' "$work/autoboot.txt"
expect "autoboot.txt: slot A (partition 2) committed, slot B (3) for a tryboot" \
	cmp -s "$work/autoboot.txt" "$repo/buildroot/board/linemq/tryboot/autoboot.txt"
mcopy -i "$work/p1" ::linemq.yaml "$work/boot-linemq.yaml"
"$here/check-config.sh" "$bin" "$work/boot-linemq.yaml" | sed 's/^/  /'

for s in A:2:5 B:3:6; do
	slot=${s%%:*} fw=${s#*:} fw=${fw%%:*} root=${s##*:}
	echo "== p$fw: slot $slot firmware (vfat)"
	expect "label LINEMQ_$slot" test "$(fatlabel "$work/p$fw")" = "LINEMQ_$slot"
	for f in config.txt cmdline.txt Image; do
		expect "has $f" mtype -i "$work/p$fw" "::$f"
	done
	mtype -i "$work/p$fw" ::cmdline.txt | tr -d '\r' >"$work/cmdline-$slot.txt"
	sed 's/^/  | /' "$work/cmdline-$slot.txt"
	expect "cmdline.txt boots /dev/mmcblk0p$root read-only as rauc.slot=$slot" \
		grep -Eq "^root=/dev/mmcblk0p$root rauc\.slot=$slot .*\bro\b" "$work/cmdline-$slot.txt"
	mtype -i "$work/p$fw" ::config.txt >"$work/config-$slot.txt"
	expect "config.txt enables the SoC watchdog" grep -qx 'dtparam=watchdog=on' "$work/config-$slot.txt"
done
expect "the two firmware slots hold the same files (cmdline.txt differs, above)" \
	diff <(mdir -i "$work/p2" -b :: | sed 's|^::/||' | sort) <(mdir -i "$work/p3" -b :: | sed 's|^::/||' | sort)

for s in A:5 B:6; do
	slot=${s%%:*} p=${s#*:}
	echo "== p$p: slot $slot root (ext4)"
	expect "label linemq-root" test "$(dumpe2fs -h "$work/p$p" 2>/dev/null | sed -n 's/^Filesystem volume name: *//p')" = linemq-root
	expect "the root file system Buildroot made (rootfs.ext4)" cmp -s -n "$(stat -c %s "$images/rootfs.ext4")" "$work/p$p" "$images/rootfs.ext4"
done
dbg() { debugfs -R "$1" "$work/p5" 2>/dev/null; }
mode() { dbg "stat $1" | sed -n 's/.*Mode: *\([0-7]*\).*/\1/p' | head -1; }
for f in /usr/bin/linemq:0755 /etc/rauc/system.conf:0644 /etc/rauc/keyring.pem:0644 \
	/usr/libexec/linemq/rauc-tryboot:0755 /usr/libexec/linemq/rauc-post-install:0755 /usr/libexec/linemq/os-trial:0755 \
	/usr/lib/systemd/system/linemq-os-trial.service:0644 /usr/lib/tmpfiles.d/linemq-rauc.conf:0644; do
	expect "${f%:*} ${f#*:}" test "$(mode "${f%:*}")" = "${f#*:}"
done
dbg "cat /etc/rauc/system.conf" >"$work/system.conf"
dbg "cat /etc/rauc/keyring.pem" >"$work/keyring.pem"
expect "system.conf: compatible=linemq-$board" grep -qx "compatible=linemq-$board" "$work/system.conf"
expect "system.conf: the tryboot backend" grep -qx 'bootloader-custom-backend=/usr/libexec/linemq/rauc-tryboot' "$work/system.conf"
expect "the keyring is the plant's certificate" cmp -s "$work/keyring.pem" "$LINEMQ_RAUC_CERT"
link=$(dbg "stat /etc/systemd/system/multi-user.target.wants/linemq-os-trial.service" | sed -n 's/^Fast link dest: "\(.*\)"/\1/p')
expect "linemq-os-trial.service enabled (-> $link)" test "$link" = /usr/lib/systemd/system/linemq-os-trial.service
dbg "cat /etc/fstab" >"$work/fstab"
expect "fstab: LINEMQBOOT (partition 1, the provisioning set) read-only at /boot" grep -Eq '^LABEL=LINEMQBOOT +/boot +vfat +ro,' "$work/fstab"
expect "fstab: data partition (LABEL=linemq-data) at /var/lib/linemq" grep -Eq '^LABEL=linemq-data +/var/lib/linemq +ext4 +rw,' "$work/fstab"

echo "== p7: data (ext4)"
expect "label linemq-data" test "$(dumpe2fs -h "$work/p7" 2>/dev/null | sed -n 's/^Filesystem volume name: *//p')" = linemq-data

echo "== the RAUC bundle (Debian's rauc $(rauc --version | awk '{print $2}'))"
bundle=$images/linemq-os-$board-2026.12.0.raucb
expect "post-image.sh signed $(basename "$bundle")" test -s "$bundle"
# The image's own system.conf, its status kept in the work directory.
sed "s|^data-directory=.*|data-directory=$work/rauc-data|" "$work/system.conf" >"$work/system-host.conf"
if rauc --conf="$work/system-host.conf" --keyring="$work/keyring.pem" info "$bundle" >"$work/info.txt" 2>&1; then
	ok "rauc info with the image's system.conf and keyring: accepted"
	grep -E "^Compatible|^Version|^Bundle Format|Filename|Slotclass|Digest" "$work/info.txt" | sed 's/^/  | /'
else
	bad "rauc info refused the bundle: $(tail -3 "$work/info.txt")"
fi
expect "the bundle is for linemq-$board" grep -Eq "^Compatible:[[:space:]]*'linemq-$board'" "$work/info.txt"
expect "version 2026.12.0" grep -Eq "^Version:[[:space:]]*'2026.12.0'" "$work/info.txt"
expect "verity format" grep -Eq "^Bundle Format:[[:space:]]*verity" "$work/info.txt"
expect "it carries the root file system Buildroot made" grep -q "$(sha256sum "$images/rootfs.ext4" | cut -d' ' -f1)" "$work/info.txt"
expect "and slot A's firmware partition" grep -q "$(sha256sum "$images/firmware-a.vfat" | cut -d' ' -f1)" "$work/info.txt"
if rauc --conf="$work/system-host.conf" --keyring="$work/stranger.pem" info "$bundle" >"$work/stranger.txt" 2>&1; then
	bad "rauc took the bundle with another plant's keyring"
else
	ok "with another plant's keyring rauc refuses it: $(grep -o 'signature verification failed.*\|Failed to verify.*' "$work/stranger.txt" | head -1)"
fi

echo
if [ "$failures" -ne 0 ]; then
	echo "sdimage-smoke: $failures check(s) failed"
	exit 1
fi
echo "sdimage-smoke: $board A/B card (tryboot) layout, files and modes as specified; its RAUC bundle verified"
