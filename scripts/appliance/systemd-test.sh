#!/bin/bash
# systemd-test.sh [--base|--updates] BINARY
#
# Boots the appliance's own root file system, with systemd as PID 1, under
# qemu-system-aarch64 -M virt: the root assembled from Debian's arm64
# packages in the Buildroot image's layout (systemd-root.sh), read-only on
# its own disk, beside a FAT boot disk and an ext4 data disk labelled as on
# the SD card. The boot disk holds a provisioning set made as
# docs/appliance.md's "From a blank card to a secured gateway" says
# (passwords, an ACL, a TLS listener, a static address, the host name, an
# NTP server, an SSH key). From the host, through hostfwd ports:
#   1. linemq-config.service applied the set; networkd, timesyncd and
#      dropbear run with its files; the host logs in with the set's key;
#   2. linemq.service reached READY=1 (Type=notify) under the unit's
#      hardening, drives its status LED on the PL061 GPIO chip, serves TLS
#      clients with the set's password and refuses anonymous ones;
#   3. the root is mounted read-only and refuses writes; journald keeps
#      the journal in /run with its size cap;
#   4. a SIGSTOPped linemq is killed by WatchdogSec= and restarted; a
#      signed update bundle, installed over SSH with linemq update apply,
#      runs from its slot on the noexec data partition, goes on trial and
#      is committed; one whose program exits at start is rolled back by
#      systemd's restart and the slots alone; one signed by another key is
#      refused; one uploaded over HTTP by the set's admin replaces linemq
#      in the same process (a reload to systemd) and is committed; one that
#      hangs is ended by TimeoutStartSec= and rolled back; one whose
#      storage check fails during its trial (the data partition frozen
#      under a commit, as by a dying card) gives up and is rolled back with
#      the reason; a power cut (QEMU killed, then booted again on its
#      disks) during a trial rolls it back, and one while a bundle is
#      written changes nothing;
#   5. PID 1 frozen (its cgroup frozen): nothing feeds the hardware
#      watchdog (softdog, RuntimeWatchdogSec=15s) and the guest is reset;
#   6. the boot disk, read on the host afterwards, holds none of the set's
#      files but linemq-applied.txt.
# Needs qemu-system-arm, qemu-user-static, e2fsprogs, dosfstools, mtools,
# cpio, curl, mosquitto-clients, openssh-client, openssl, python3, systemd
# (systemd-sysusers, systemctl) and Go; checked first (needs.sh).
# systemd-test.sh --needs only checks.
set -euo pipefail

"$(dirname "$0")/needs.sh" systemd-test \
	qemu-system-aarch64:qemu-system-arm qemu-aarch64-static:qemu-user-static \
	mkfs.ext4:e2fsprogs mkfs.vfat:dosfstools mcopy:mtools mdir:mtools cpio:cpio gzip:gzip curl:curl \
	mosquitto_sub:mosquitto-clients mosquitto_pub:mosquitto-clients ssh:openssh-client ssh-keygen:openssh-client \
	openssl:openssl python3:python3 systemd-sysusers:systemd systemctl:systemd dpkg:dpkg apt-get:apt
[ "${1-}" = --needs ] && exit 0

# --base: steps 1-3, 5 and 6; --updates: the updates of step 4 (make
# update-test); neither: all of them.
part=all
case ${1-} in --base | --updates) part=${1#--} && shift ;; esac
want() { [ "$part" = all ] || [ "$part" = "$1" ]; }
bin=$(realpath "${1:?usage: systemd-test.sh [--base|--updates] BINARY}")
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${LINEMQ_APPLIANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/linemq-appliance}
work=$(mktemp -d /tmp/linemq-systemd.XXXXXX)
qpid=
cleanup() {
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then kill "$qpid"; fi
	rm -rf "$work"
}
trap cleanup EXIT
step() { echo "== $*"; }
fail() {
	echo "systemd-test: FAIL: $*"
	echo "--- guest console (last 60 lines; all of it in /tmp/linemq-systemd-console.log)"
	tail -60 "$work/console.log" 2>/dev/null || true
	cp "$work/console.log" /tmp/linemq-systemd-console.log 2>/dev/null || true
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
		echo "--- journal (last 60 lines)"
		guest journalctl -b --no-pager -n 60 2>/dev/null || true
	fi
	exit 1
}

# shellcheck source=guest-kernel.sh
. "$repo/scripts/appliance/guest-kernel.sh"
# shellcheck source=systemd-root.sh
. "$repo/scripts/appliance/systemd-root.sh"
guest_kernel "$cache" "${GUEST_MODULES[@]}" || fail "no guest kernel"

step "the root file system: Debian's arm64 packages in the appliance's layout, linemq, its units and the overlay"
systemd_root "$cache" "$work/root" "$bin" || fail "could not assemble the root file system"
echo "  $(ls "$cache"/systemd-debs/*.deb | wc -l) packages, systemd $(sed -n 's/.*systemd_\([^_]*\)_arm64.deb/\1/p' <<<"$(ls "$cache"/systemd-debs/systemd_*.deb)"), $(du -sh "$work/root" | cut -f1)"
echo "  enabled: $(cd "$work/root/etc/systemd/system" && find . -name '*.wants' -type d -exec ls {} + 2>/dev/null | grep -v ':$' | grep . | sort -u | tr '\n' ' ')"
sed 's/^/  fstab | /' "$work/root/etc/fstab"
mkfs.ext4 -q -F -L linemq-root -d "$work/root" "$work/root.ext4" 256M

step "the initramfs (the Debian kernel's disk and file system drivers are modules; Buildroot's kernel has them built in)"
ird=$work/initramfs
mkdir -p "$ird"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$cache/busybox" "$ird/bin/busybox"
for m in "${GUEST_MODULES[@]}"; do cp "$cache/modules/$m.ko" "$ird/lib/modules/"; done
# The init loads them in GUEST_MODULES' order, each after what it needs.
echo "${GUEST_MODULES[*]}" >"$ird/lib/modules/order"
cat >"$ird/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /lib/modules/order); do
	insmod /lib/modules/$m.ko || echo "initramfs: insmod $m failed"
done
i=0
until root=$(findfs LABEL=linemq-root 2>/dev/null); do
	i=$((i + 1))
	[ $i -lt 100 ] || { echo "initramfs: no linemq-root"; exec sh; }
	sleep 0.1
done
mount -t ext4 -o ro "$root" /newroot || { echo "initramfs: cannot mount $root"; exec sh; }
echo "initramfs: $root on / read-only; starting systemd"
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /usr/sbin/init
INIT
chmod 0755 "$ird/init"
(cd "$ird" && find . | cpio -o -H newc --quiet) | gzip -1 >"$work/initrd.gz"

step "the provisioning set: docs/appliance.md's \"From a blank card to a secured gateway\", steps 2 and 3, run as written"
# The shell blocks under that heading, in a directory standing for the
# PC (bin/linemq is the host build), with B pointing at a directory
# standing for the card instead of /media/LINEMQBOOT, and the password
# typed at linemq passwd's prompts on a pseudo-terminal.
pc=$work/pc
set=$work/set
mkdir -p "$pc/bin" "$set"
(cd "$repo" && go build -o "$pc/bin/linemq" ./cmd/linemq)
awk '/^## From a blank card to a secured gateway/ { on = 1; next } /^## / { on = 0 } on' "$repo/docs/appliance.md" |
	awk '/^ *```sh$/ { inb = 1; n++; next } /^ *```$/ { inb = 0; next } inb && n <= 2' | sed 's/^   //' |
	sed "s|^B=/media/LINEMQBOOT\$|B=$set|" >"$pc/steps.sh"
grep -q "^B=$set\$" "$pc/steps.sh" || fail "docs/appliance.md's steps no longer set B=/media/LINEMQBOOT"
sed 's/^/  doc | /' "$pc/steps.sh" | grep -v '^  doc | *$' | head -60
(cd "$pc" && printf 's3cret\ns3cret\n' | python3 -c 'import pty, sys; sys.exit(pty.spawn(["bash", "-e", "steps.sh"]) >> 8)') \
	>"$work/steps.log" 2>&1 || { cat "$work/steps.log"; fail "the doc's steps failed"; }
grep -E 'linemq provision' "$work/steps.log" | sed 's/^/  | /'
# The test's own additions: the emulated board's status LED (line 4 of
# its PL061; line 3 is QEMU's power button), not optional, so that
# linemq must reach the GPIO chip through the unit's DevicePolicy=closed;
# an SSH key for the test to log in with; an update signing key, a short
# update trial and scada as the admin who may upload bundles.
printf 'hw:\n  leds:\n    status: {gpio: gpiochip0/4}\nupdate:\n  trial: 60s\n  admins: [scada]\n' >>"$set/linemq.yaml"
ssh-keygen -q -t ed25519 -N '' -C linemq-test -f "$work/id_ed25519"
cp "$work/id_ed25519.pub" "$set/linemq/authorized_keys"
mkdir -p "$set/linemq/update-keys"
"$pc/bin/linemq" update keygen -dir "$work" plant >/dev/null
cp "$work/plant.pub" "$set/linemq/update-keys/plant.pub"
"$pc/bin/linemq" provision check -no-trial -conf /nonexistent "$set" | sed 's/^/  | /' || fail "the set with the test's additions does not pass linemq provision check"
pki=$pc
mkfs.vfat -C -n LINEMQBOOT "$work/boot.vfat" 65536 >/dev/null
mcopy -s -i "$work/boot.vfat" "$set/linemq.yaml" "$set/linemq" ::/
truncate -s 256M "$work/data.ext4"
mkfs.ext4 -q -F -L linemq-data -m 0 "$work/data.ext4"

# --- boot
guest() { # guest CMD...: runs CMD in the guest over SSH, as root, with the set's key
	# ssh's own failures (255: no connection; dropbear is restarted when
	# the set's keys are applied) are tried again; the command's are not.
	local rc=0 try
	for try in 1 2 3; do
		timeout 60 ssh -q -i "$work/id_ed25519" -p "$sshp" -o BatchMode=yes -o StrictHostKeyChecking=no \
			-o UserKnownHostsFile=/dev/null -o ConnectTimeout=20 root@127.0.0.1 "$@" && return 0 || rc=$?
		[ "$rc" -eq 255 ] || return "$rc"
		sleep 2
	done
	return "$rc"
}
read -r mqtt mqtts http sshp <<<"$(free_ports 4)"
# boot LABEL: starts QEMU on the three disks and waits for /readyz and
# an SSH login; a power cut is a SIGKILL of QEMU, and the next boot finds
# the disks as the guest had left them.
boot() {
	step "booting systemd ($1): qemu-system-aarch64 -M virt (MQTT 127.0.0.1:$mqtt, MQTTS $mqtts, HTTP $http, SSH $sshp)"
	start=$SECONDS
	qemu-system-aarch64 -M virt -cpu cortex-a53 -smp 2 -m 768 -nographic -no-reboot \
		-kernel "$cache/vmlinuz" -initrd "$work/initrd.gz" \
		-append "console=ttyAMA0 panic=-1 loglevel=4 systemd.journald.forward_to_console=1" \
		-drive "if=none,id=root,format=raw,file=$work/root.ext4" -device virtio-blk-device,drive=root \
		-drive "if=none,id=boot,format=raw,file=$work/boot.vfat" -device virtio-blk-device,drive=boot \
		-drive "if=none,id=data,format=raw,file=$work/data.ext4" -device virtio-blk-device,drive=data \
		-netdev "user,id=n0,restrict=on,net=10.0.0.0/24,host=10.0.0.1,dhcpstart=10.0.0.50,hostfwd=tcp:127.0.0.1:$mqtt-10.0.0.11:1883,hostfwd=tcp:127.0.0.1:$mqtts-10.0.0.11:8883,hostfwd=tcp:127.0.0.1:$http-10.0.0.11:8080,hostfwd=tcp:127.0.0.1:$sshp-10.0.0.11:22" \
		-device virtio-net-device,netdev=n0 \
		</dev/null >"$work/console.log" 2>&1 &
	qpid=$!
	deadline=$((SECONDS + ${APPLIANCE_BOOT_TIMEOUT:-240}))
	until curl -fsS -o /dev/null "http://127.0.0.1:$http/readyz" 2>/dev/null; do
		kill -0 "$qpid" 2>/dev/null || fail "QEMU exited during boot"
		[ $SECONDS -lt $deadline ] || fail "no /readyz within ${APPLIANCE_BOOT_TIMEOUT:-240} s"
		sleep 0.5
	done
	echo "  /readyz 200 after $((SECONDS - start)) s"
	until guest true 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || fail "no SSH login with the set's key"
		sleep 1
	done
}
# power_cut: QEMU killed at once.
power_cut() {
	kill -KILL "$qpid"
	wait "$qpid" 2>/dev/null || true
	qpid=
}
# await_rollback VERSION SECONDS: waits until VERSION is the last rollback
# and linemq serves again (the unit active, /readyz answering); status 1
# after SECONDS.
await_rollback() {
	local deadline=$((SECONDS + $2))
	until guest linemq update status | grep -q "^last rollback: $1" &&
		[ "$(guest systemctl is-active linemq.service)" = active ] &&
		curl -fsS -o /dev/null "http://127.0.0.1:$http/readyz" 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 2
	done
}
boot "first boot"
grep -E 'initramfs:|systemd\[1\]: (systemd [0-9]|Using hardware watchdog|Watchdog running)' "$work/console.log" | sed 's/^/  console | /' | cut -c1-200 || true

step "systemd is PID 1; the set applied; networkd, timesyncd and dropbear running with its files"
pid1=$(guest cat /proc/1/comm)
[ "$pid1" = systemd ] || fail "PID 1 is $pid1"
echo "  ssh root@ with the set's key: PID 1 is $pid1 ($(guest systemctl --version | head -1))"
guest journalctl -b --no-pager -o cat -u linemq-config.service | grep 'linemq' | sed 's/^/  | /' | cut -c1-200
guest journalctl -b --no-pager -o cat -u linemq-config.service | grep -q 'linemq provision: applied linemq.yaml' ||
	fail "linemq-config.service did not apply the set"
for u in linemq-config systemd-networkd systemd-timesyncd systemd-journald systemd-udevd dropbear linemq; do
	s=$(guest systemctl is-active "$u.service" || true)
	echo "  $u.service: $s"
	[ "$s" = active ] || fail "$u.service is $s"
done
addr=$(guest ip -4 -o addr show dev eth0 | awk '{print $4}')
[ "$addr" = 10.0.0.11/24 ] || fail "eth0 has $addr"
guest test -f /run/systemd/network/10-linemq-eth0.network || fail "the set's .network file is not in /run/systemd/network"
echo "  eth0 $addr from the set's eth0.network (/run/systemd/network/10-linemq-eth0.network)"
ntp=$(guest cat /run/systemd/timesyncd.conf.d/10-linemq.conf | tr '\n' ' ')
echo "  timesyncd: $ntp"
grep -q 'NTP=10.0.0.1' <<<"$ntp" || fail "timesyncd did not get the set's NTP server"
hn=$(guest hostname)
[ "$hn" = hall-3-gw-1 ] || fail "host name $hn"
echo "  host name $hn"

if want base; then
	step "linemq.service: Type=notify reached READY=1, the hardening, the GPIO chip, the set's listeners"
	guest systemctl show linemq.service -p Type -p NotifyAccess -p ActiveState -p SubState -p MainPID -p NRestarts \
		-p WatchdogUSec -p DevicePolicy -p ProtectSystem -p User -p RestartPreventExitStatus >"$work/show"
	sed 's/^/  | /' "$work/show"
	grep -qx 'Type=notify' "$work/show" && grep -qx 'SubState=running' "$work/show" && grep -qx 'DevicePolicy=closed' "$work/show" ||
		fail "linemq.service is not a running Type=notify service under DevicePolicy=closed"
	guest journalctl -b --no-pager -o short-monotonic -u linemq.service >"$work/journal-linemq"
	grep -E 'msg=ready|msg=hardware|Started linemq' "$work/journal-linemq" | sed 's/^/  | /' | cut -c1-220
	mono() { grep -m1 "$1" "$work/journal-linemq" | sed 's/^\[ *\([0-9.]*\)\].*/\1/'; }
	t_starting=$(mono 'Starting linemq')
	t_hw=$(mono 'msg=hardware')
	t_started=$(mono 'Started linemq')
	t_ready=$(mono 'msg=ready')
	[ -n "$t_starting" ] && [ -n "$t_hw" ] && [ -n "$t_started" ] && [ -n "$t_ready" ] ||
		fail "linemq.service's journal lacks Starting, hardware, Started or ready"
	# systemd marks a Type=notify service started only when READY=1 arrives,
	# which linemq sends once its listeners accept, just before it logs
	# "ready": "Started" must come after linemq's start-up work (its hardware
	# record), not when the process was forked.
	awk -v a="$t_starting" -v h="$t_hw" -v s="$t_started" 'BEGIN { exit !(a < h && h < s) }' ||
		fail "systemd said Started before linemq had started up"
	echo "  READY=1: systemd started the unit at ${t_starting} s, linemq drove its LEDs at ${t_hw} s, systemd marked it started at ${t_started} s (linemq's ready record: ${t_ready} s)"
	grep 'msg=hardware' "$work/journal-linemq" | grep -q 'leds="status=GPIO4 ' || fail "linemq does not drive its status LED on gpiochip0/4"
	# The unit's device policy, tried from inside its cgroup (where systemd's
	# device filter applies): the watchdog devices are allowed (busy: PID 1
	# holds the watchdog for RuntimeWatchdogSec=), a disk is not. linemq's
	# own status LED above shows the GPIO chip allowed.
	for dev in /dev/watchdog /dev/watchdog0 /dev/vda; do
		res=$(guest "echo \$\$ >/sys/fs/cgroup/system.slice/linemq.service/cgroup.procs && exec 3<>$dev" 2>&1 || true)
		echo "  open $dev in linemq.service's cgroup: ${res:-opened}"
		case $dev:$res in
		/dev/watchdog*:*"resource busy"* | /dev/vda:*"not permitted"*) ;;
		*) fail "the device policy: $dev gave '$res'" ;;
		esac
	done
	# Step 5 of the doc. The host reaches the guest as 127.0.0.1, not as
	# 10.0.0.11 (the name in its certificate), so the TLS clients skip the
	# name check (--insecure); the chain is still verified against ca.crt.
	if mosquitto_pub -h 127.0.0.1 -p "$mqtt" -t line/x -m hi 2>"$work/anon"; then
		fail "an anonymous client was accepted"
	fi
	echo "  anonymous: refused ($(tr '\n' ' ' <"$work/anon" | cut -c1-80))"
	if mosquitto_pub -h 127.0.0.1 -p "$mqtts" --cafile "$pki/ca.crt" --insecure -u scada -P guess -t line/x -m hi 2>"$work/wrong"; then
		fail "a wrong password was accepted"
	fi
	echo "  TLS with a wrong password: refused ($(tr '\n' ' ' <"$work/wrong" | cut -c1-80))"
	mosquitto_sub -h 127.0.0.1 -p "$mqtts" --cafile "$pki/ca.crt" --insecure -u scada -P s3cret -t 'line/#' -C 1 -W 30 >"$work/sec" &
	secsub=$!
	sleep 2
	mosquitto_pub -h 127.0.0.1 -p "$mqtts" --cafile "$pki/ca.crt" --insecure -u scada -P s3cret -t line/x -m hello ||
		fail "the TLS client with the plant CA and its password was refused"
	wait "$secsub" || fail "TLS round trip: nothing received"
	[ "$(cat "$work/sec")" = hello ] || fail "TLS round trip: got '$(cat "$work/sec")'"
	echo "  TLS with the plant CA and the set's password: line/x \"$(cat "$work/sec")\""

	step "the root is read-only; the journal is volatile and capped"
	rootopts=$(guest cat /proc/mounts | awk '$2 == "/" { print $1, $3, $4 }' | tail -1)
	echo "  / : $rootopts"
	case $rootopts in *" ro,"* | *" ro") ;; *) fail "the root is mounted $rootopts" ;; esac
	if guest touch /usr/written 2>"$work/touch"; then fail "a write to the root succeeded"; fi
	echo "  touch /usr/written as root: $(tr '\n' ' ' <"$work/touch" | sed 's/^ *//')"
	guest test -d /run/log/journal || fail "no journal in /run/log/journal"
	if guest test -d /var/log/journal; then fail "a persistent journal in /var/log/journal"; fi
	jline=$(guest journalctl -b --no-pager -o cat -u systemd-journald.service | grep -m1 'Runtime Journal' || true)
	echo "  journald: $jline"
	grep -q 'max 16.0M' <<<"$jline" || fail "the runtime journal is not capped at 16M"

	step "WatchdogSec: a SIGSTOPped linemq is killed and restarted"
	pid=$(guest systemctl show -p MainPID --value linemq.service)
	t0=$SECONDS
	guest kill -STOP "$pid"
	deadline=$((SECONDS + 120))
	until [ "$(guest systemctl show -p NRestarts --value linemq.service 2>/dev/null)" = 1 ] &&
		curl -fsS -o /dev/null "http://127.0.0.1:$http/readyz" 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || fail "linemq was not restarted within 120 s of SIGSTOP"
		sleep 1
	done
	newpid=$(guest systemctl show -p MainPID --value linemq.service)
	echo "  pid $pid stopped; pid $newpid ready $((SECONDS - t0)) s later (WatchdogSec=30s)"
	guest journalctl -b --no-pager -o cat -u linemq.service | grep -E 'Watchdog timeout|SIGABRT|Main process exited|Failed with result|Scheduled restart' |
		sed 's/^/  | /' | cut -c1-200
	guest journalctl -b --no-pager -o cat -u linemq.service | grep -q "Failed with result 'watchdog'" || fail "the restart was not the watchdog's"
	[ "$newpid" != "$pid" ] || fail "MainPID unchanged"

fi

if want updates; then
	step "updates: a signed bundle installed over SSH goes on trial and is committed; one whose program exits at start is rolled back by itself"
	# The arm64 build itself, as version v-upd; and, as a program that exits at
	# start, the test's arm64 gpiocheck (it refuses linemq's flags: status 2).
	"$pc/bin/linemq" update bundle -key "$work/plant.key" -version v-upd -o "$work/upd.bundle" "$bin" | sed 's/^/  | /'
	(cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -trimpath -o "$work/gpiocheck" ./scripts/appliance/gpiocheck)
	"$pc/bin/linemq" update bundle -key "$work/plant.key" -version v-crash -o "$work/crash.bundle" "$work/gpiocheck" | sed 's/^/  | /'
	# The starts so far (boot, the watchdog's restart) and the ones below
	# would come near StartLimitBurst=5 in 10 minutes, whose action reboots
	# the board: clear the count, as an operator doing this by hand would not
	# need to.
	guest systemctl reset-failed linemq.service
	guest 'cat >/tmp/upd.bundle' <"$work/upd.bundle"
	guest linemq update apply /tmp/upd.bundle | sed 's/^/  | /' || fail "linemq update apply refused the bundle"
	t0=$SECONDS
	guest systemctl restart linemq.service
	deadline=$((SECONDS + 150))
	until guest journalctl -b --no-pager -o cat -u linemq.service | grep -q 'msg="update: committed'; do
		[ $SECONDS -lt $deadline ] || fail "the update was not committed within 150 s"
		sleep 2
	done
	guest journalctl -b --no-pager -o cat -u linemq.service | grep -E 'msg="update: (on trial|committed|running)' | sed 's/^/  | /' | cut -c1-200
	echo "  committed $((SECONDS - t0)) s after the restart (update.trial 60s)"
	guest linemq update status | sed 's/^/  | /'
	guest linemq update status | grep -q '^in force: v-upd (slot a)' || fail "v-upd is not in force"
	guest 'cat >/tmp/crash.bundle' <"$work/crash.bundle"
	guest linemq update apply /tmp/crash.bundle | sed 's/^/  | /' || fail "linemq update apply refused the second bundle"
	restarts=$(guest systemctl show -p NRestarts --value linemq.service)
	t0=$SECONDS
	guest systemctl restart linemq.service || true
	await_rollback v-crash 90 || fail "the version that exits at start was not rolled back within 90 s"
	guest linemq update status | sed 's/^/  | /'
	guest linemq update status | grep -q '^in force: v-upd (slot a)' || fail "v-upd is not in force after the rollback"
	echo "  rolled back and serving $((SECONDS - t0)) s after the restart; systemd restarted linemq $(($(guest systemctl show -p NRestarts --value linemq.service) - restarts)) time(s)"

	step "updates: a bundle signed by another key is refused and changes nothing"
	"$pc/bin/linemq" update keygen -dir "$work" stranger >/dev/null
	"$pc/bin/linemq" update bundle -key "$work/stranger.key" -version v-evil -o "$work/evil.bundle" "$bin" >/dev/null
	guest 'cat >/tmp/evil.bundle' <"$work/evil.bundle"
	if guest linemq update apply /tmp/evil.bundle >"$work/evil.out" 2>&1; then fail "a bundle signed by another key was installed"; fi
	sed 's/^/  | /' "$work/evil.out"
	grep -q 'signed by none of the 1 trusted keys' "$work/evil.out" || fail "the refusal does not say why"
	guest linemq update status >"$work/status" && sed 's/^/  | /' "$work/status"
	grep -q '^in force: v-upd (slot a)' "$work/status" && ! grep -q '^on trial' "$work/status" || fail "the refused bundle changed the slots"

	step "updates: uploaded through the HTTP API by an admin; linemq replaces itself in the same process (systemd sees a reload, not a stop) and commits"
	"$pc/bin/linemq" update bundle -key "$work/plant.key" -version v-http -o "$work/http.bundle" "$bin" >/dev/null
	pid0=$(guest systemctl show -p MainPID --value linemq.service)
	restarts=$(guest systemctl show -p NRestarts --value linemq.service)
	t0=$SECONDS
	curl -fsS -u scada:s3cret -H 'Content-Type: application/octet-stream' --data-binary @"$work/http.bundle" \
		"http://127.0.0.1:$http/api/v1/update" >"$work/upload" || fail "the upload was refused: $(cat "$work/upload")"
	sed 's/^/  | /' "$work/upload"; echo
	deadline=$((SECONDS + 180))
	until guest linemq update status | grep -q '^in force: v-http (slot b)'; do
		[ $SECONDS -lt $deadline ] || fail "the uploaded version was not committed within 180 s"
		sleep 2
	done
	guest journalctl -b --no-pager -o cat -u linemq.service | grep -E 'msg="update: (bundle uploaded|restarting|running|on trial|committed)|Reload|reload' |
		tail -6 | sed 's/^/  | /' | cut -c1-200
	pid1=$(guest systemctl show -p MainPID --value linemq.service)
	[ "$pid1" = "$pid0" ] || fail "linemq's main process changed ($pid0, then $pid1): it was restarted, not replaced in place"
	[ "$(guest systemctl show -p NRestarts --value linemq.service)" = "$restarts" ] || fail "systemd restarted linemq for the upload"
	[ "$(guest systemctl is-active linemq.service)" = active ] || fail "linemq.service is $(guest systemctl is-active linemq.service) after the upload"
	echo "  committed $((SECONDS - t0)) s after the upload; main PID $pid1 throughout, no restart by systemd"

	step "updates: a version that hangs at start (never READY=1) is killed by TimeoutStartSec= and rolled back by itself"
	# A Go program (bundles carry Go builds: the architecture is read from
	# the build information) that sleeps and never tells systemd it is ready.
	mkdir -p "$work/hang"
	printf 'package main\n\nimport "time"\n\nfunc main() { time.Sleep(time.Hour) }\n' >"$work/hang/main.go"
	(cd "$work/hang" && CGO_ENABLED=0 GOOS=linux GOARCH=arm64 GOFLAGS= go build -o "$work/hang/hang" main.go)
	"$pc/bin/linemq" update bundle -key "$work/plant.key" -version v-hang -o "$work/hang.bundle" "$work/hang/hang" >/dev/null
	guest 'cat >/tmp/hang.bundle' <"$work/hang.bundle"
	guest linemq update apply /tmp/hang.bundle | sed 's/^/  | /' || fail "linemq update apply refused the hanging bundle"
	guest systemctl reset-failed linemq.service
	t0=$SECONDS
	guest systemctl restart --no-block linemq.service
	await_rollback v-hang 240 || fail "the version that hangs was not rolled back within 240 s"
	guest journalctl -b --no-pager -o cat -u linemq.service | grep -E 'timed out|Failed with result|rolled back' | tail -3 | sed 's/^/  | /' | cut -c1-200
	guest linemq update status | sed 's/^/  | /'
	guest linemq update status | grep -q '^in force: v-http (slot b)' || fail "v-http is not in force after the hang's rollback"
	echo "  rolled back and serving $((SECONDS - t0)) s after the restart (TimeoutStartSec=90s)"

	step "updates: a version whose health check fails during its trial gives up and is rolled back by itself"
	# The arm64 build as v-sick. 16 s into its trial the data partition
	# stops answering, as a dying SD card does (fsfreeze, from inside the
	# guest), and a retained QoS 1 message gives the store a commit to wait
	# for: the storage check fails, and after its grace (three probes,
	# 15 s) the trial gives up, recording why. That record waits on the
	# frozen disk too, so the card recovers (fsfreeze --unfreeze) 18 s after
	# the check failed; the version then exits 1 and systemd's restart
	# rolls it back with the reason.
	"$pc/bin/linemq" update bundle -key "$work/plant.key" -version v-sick -o "$work/sick.bundle" "$bin" >/dev/null
	guest 'cat >/tmp/sick.bundle' <"$work/sick.bundle"
	guest linemq update apply /tmp/sick.bundle | sed 's/^/  | /' || fail "linemq update apply refused v-sick"
	guest systemctl reset-failed linemq.service
	t0=$SECONDS
	# The guest's side, as a script there: it reacts within a second. In
	# /run: an SSH session's /tmp need not be the one systemd's units see.
	guest 'cat >/run/linemq-test-sick.sh' <<'SICK'
case $1 in
freeze)
	# Restart into the version on trial; freeze the data partition as soon
	# as its trial has begun.
	# The stuck process is the trial's, not the watchdog's, to end here:
	# systemd's WatchdogSec= (30 s) is the hang case above, and would end
	# it while it waits on the frozen disk to record why it gives up.
	mkdir -p /run/systemd/system/linemq.service.d
	printf '[Service]\nWatchdogSec=150s\n' >/run/systemd/system/linemq.service.d/zz-test-sick.conf
	systemctl daemon-reload
	n=$(journalctl -b -o cat -u linemq.service | grep -c 'msg="update: on trial"')
	journalctl -b -o cat -u linemq.service | grep -cE 'msg="health: failed" .*check=storage' >/run/linemq-test-sick.failed
	systemctl restart --no-block linemq.service
	i=0
	until [ "$(journalctl -b -o cat -u linemq.service | grep -c 'msg="update: on trial"')" -gt "$n" ]; do
		i=$((i + 1))
		[ $i -lt 150 ] || { echo "v-sick did not go on trial within 30 s"; exit 1; }
		sleep 0.2
	done
	sleep 16
	fsfreeze --freeze /var/lib/linemq && echo "on trial; /var/lib/linemq frozen 16 s later"
	;;
recover)
	# Once the storage check has failed, the card recovers after 25 s.
	i=0
	until [ "$(journalctl -b -o cat -u linemq.service | grep -cE 'msg="health: failed" .*check=storage')" -gt "$(cat /run/linemq-test-sick.failed)" ]; do
		i=$((i + 1))
		[ $i -lt 180 ] || { fsfreeze --unfreeze /var/lib/linemq; echo "the storage check did not fail within 90 s"; exit 1; }
		sleep 0.5
	done
	echo "the storage check failed ($((i / 2)) s after this began); the card recovers in 18 s"
	sleep 18
	fsfreeze --unfreeze /var/lib/linemq && echo "/var/lib/linemq thawed"
	;;
esac
SICK
	guest sh /run/linemq-test-sick.sh freeze >"$work/sick.out" 2>&1 || { sed 's/^/  | /' "$work/sick.out"; fail "v-sick did not go on trial, or the data partition could not be frozen"; }
	sed 's/^/  | /' "$work/sick.out"
	timeout 180 mosquitto_pub -h 127.0.0.1 -p "$mqtts" --cafile "$pki/ca.crt" --insecure -u scada -P s3cret \
		-q 1 -r -t line/sick -m "stored while the card hangs" 2>/dev/null &
	sickpub=$!
	# The recovery outlasts an SSH command's minute: systemd runs it.
	guest systemd-run --quiet --unit=linemq-test-sick --property=StandardOutput=file:/run/linemq-test-sick.log sh /run/linemq-test-sick.sh recover
	if ! await_rollback v-sick 180; then
		guest systemctl status --no-pager linemq-test-sick.service 2>&1 | sed 's/^/  | /' || true
		fail "the version whose health failed was not rolled back within 180 s of the freeze ($(guest cat /run/linemq-test-sick.log | tr '\n' ' '))"
	fi
	wait "$sickpub" 2>/dev/null || true
	guest cat /run/linemq-test-sick.log | sed 's/^/  | /'
	guest 'rm /run/systemd/system/linemq.service.d/zz-test-sick.conf && systemctl daemon-reload'
	guest grep -q thawed /run/linemq-test-sick.log || fail "the data partition was not thawed after the storage check failed"
	guest journalctl -b --no-pager -o cat -u linemq.service | grep -E 'msg="health: failed"|giving up the trial|Failed with result|rolled back' |
		tail -4 | sed 's/^/  | /' | cut -c1-240
	guest linemq update status >"$work/status" && sed 's/^/  | /' "$work/status"
	grep -q '^last rollback: v-sick .*unhealthy for .*storage' "$work/status" ||
		fail "v-sick's rollback does not give its failed storage check as the reason"
	grep -q '^in force: v-http (slot b)' "$work/status" || fail "v-http is not in force after v-sick's rollback"
	echo "  rolled back and serving $((SECONDS - t0)) s after the restart"

	step "updates: a power cut during a trial: the next boot rolls the version back"
	"$pc/bin/linemq" update bundle -key "$work/plant.key" -version v-cut -o "$work/cut.bundle" "$bin" >/dev/null
	guest 'cat >/tmp/cut.bundle' <"$work/cut.bundle"
	guest linemq update apply /tmp/cut.bundle | sed 's/^/  | /' || fail "linemq update apply refused v-cut"
	guest systemctl restart --no-block linemq.service
	deadline=$((SECONDS + 60))
	until guest linemq update status | grep -q '^on trial: v-cut .*started 1 time'; do
		[ $SECONDS -lt $deadline ] || fail "v-cut did not start its trial within 60 s"
		sleep 1
	done
	guest linemq update status | sed 's/^/  | /'
	power_cut
	echo "  power cut (QEMU killed) with v-cut started on its trial (update.trial 60s)"
	boot "after the power cut during the trial"
	guest journalctl -b --no-pager -o cat -u linemq.service | grep -E 'msg="update: (rolled back|running)' | sed 's/^/  | /' | cut -c1-200
	guest linemq update status >"$work/status" && sed 's/^/  | /' "$work/status"
	grep -q '^last rollback: v-cut' "$work/status" && grep -q '^in force: v-http (slot b)' "$work/status" ||
		fail "the version cut off during its trial was not rolled back"

	step "updates: a power cut while a bundle is being written: the version in force stays, the next install works"
	# The writer is frozen (SIGSTOP) once the program's first bytes are in
	# its staging directory, so that the cut comes mid-write whatever the
	# disk's speed.
	guest 'cat >/tmp/cut.bundle' <"$work/cut.bundle"
	guest 'linemq update apply /tmp/cut.bundle >/dev/null 2>&1 & p=$!; while [ ! -s /var/lib/linemq/update/slots/a.new/linemq ]; do kill -0 $p 2>/dev/null || break; done; kill -STOP $p; ls -l /var/lib/linemq/update/slots/a.new/; sync' |
		sed 's/^/  | /'
	power_cut
	echo "  power cut with the bundle half written into slots/a.new"
	boot "after the power cut while writing"
	guest linemq update status >"$work/status" && sed 's/^/  | /' "$work/status"
	grep -q '^in force: v-http (slot b)' "$work/status" && ! grep -q '^on trial' "$work/status" ||
		fail "the power cut while writing changed the version in force or left a trial"
	guest 'cat >/tmp/cut.bundle' <"$work/cut.bundle"
	guest linemq update apply /tmp/cut.bundle | sed 's/^/  | /' || fail "the install after the cut failed"

fi

if want base; then
	step "PID 1 frozen: nothing feeds softdog (RuntimeWatchdogSec=15s), the guest must be reset"
	guest 'echo 1 >/sys/fs/cgroup/init.scope/cgroup.freeze'
	t0=$SECONDS
	deadline=$((SECONDS + 60))
	while kill -0 "$qpid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
	kill -0 "$qpid" 2>/dev/null && fail "the guest was not reset within 60 s of freezing PID 1"
	wait "$qpid" || true
	qpid=
	grep -q 'softdog: Initiating system reboot' "$work/console.log" || fail "QEMU exited, but not by softdog"
	grep -E 'softdog' "$work/console.log" | sed 's/^/  console | /' | cut -c1-160
	echo "  reset by softdog $((SECONDS - t0)) s after PID 1 was frozen; QEMU exited (-no-reboot)"

	step "the boot disk, read on the host: the set's files are gone"
	mdir -i "$work/boot.vfat" -/ -b :: | sed 's/^/  | /'
	if mdir -i "$work/boot.vfat" -/ -b :: | grep -Eq '::/(linemq\.yaml|linemq/)'; then fail "files of the applied set stay on the boot disk"; fi
	mdir -i "$work/boot.vfat" -b :: | grep -q 'linemq-applied.txt' || fail "no linemq-applied.txt on the boot disk"

fi

echo
case $part in
base) echo "systemd-test: systemd as PID 1 on the read-only root, the provisioning set applied (networkd, timesyncd, dropbear, TLS, passwords, an update key), READY=1, WatchdogSec restart of a stopped linemq, softdog reset of a frozen PID 1, volatile capped journal passed" ;;
updates) echo "systemd-test --updates: on the appliance's root under systemd, a signed update committed after its trial; one that exits at start, one that hangs and one whose health check fails rolled back by themselves; one signed by another key refused; one uploaded over HTTP replacing linemq in place and committed; power cuts during a trial (rolled back) and while writing (nothing changed) passed" ;;
*) echo "systemd-test: all of the base steps and the updates passed" ;;
esac
