#!/bin/bash
# appliance-test.sh BINARY
#
# Boots the arm64 linemq for real under qemu-system-aarch64 -M virt with
# Debian's arm64 kernel and an initramfs whose init (busybox) loads the
# virtio-net and softdog modules, configures the network and starts linemq
# with the appliance's factory configuration plus the kernel watchdog
# (softdog, 5 s). From the host, through hostfwd ports on 127.0.0.1 (the
# guest's user-mode network is restricted: it reaches nothing outside):
#   0. first boot: the appliance's apply-config takes linemq.yaml from the
#      "boot partition", checks it with linemq, bind-mounts it over
#      /etc/linemq; linemq runs with its node_id and watchdog;
#   1. /readyz answers 200 and the status page is served;
#   2. an MQTT publish/subscribe round trip; the status LED on line 4 of
#      the virt board's PL061 (gpiochip0/4), which linemq drives through
#      periph.io's gpioioctl: a test-only helper in the guest
#      (scripts/appliance/gpiocheck) finds the line held by linemq, samples
#      its level from the kernel's GPIO debugfs file (the PL061's data
#      register) and sees the heartbeat, and drives a spare line (5) high
#      and low through periph.io, reading it back; then a shared
#      subscription ($share/g/...) with two members that splits six
#      messages between them, each delivered once;
#   3. the clock (scripts/appliance/clockcheck, on the host): 100 clients
#      stay connected while the guest's wall clock is stepped a year forward
#      and back, session and message expiry keep to the monotonic clock,
#      and linemq started again with the clock at 1970 on its data neither
#      expires its sessions at once nor keeps them for ever;
#   3b. the watchdog path, through a test-only control in the guest (a port
#      the init listens on): it freezes linemq (SIGSTOP, a hung process),
#      and softdog resets the guest, which -no-reboot turns into QEMU
#      exiting;
#   4. after a second boot with a provisioning set holding one bad ACL line
#      (refused whole, named on the page; the factory configuration kept),
#      the health gate: the control fills the data
#      partition while a persistent session needs its messages stored; the
#      storage check fails, /readyz answers 503 with the reason, linemq
#      stops feeding the watchdog and softdog resets the guest;
#   5. a third boot with the same set made good (passwords, an ACL, a TLS
#      listener with the plant CA made here by openssl, a static address,
#      the host name, an NTP server): applied whole, gone from the boot
#      partition but for linemq-applied.txt, the system's files in /run;
#      anonymous clients and a wrong password refused, a TLS client with
#      the CA and its password served.
# The kernel and busybox come from Debian's arm64 packages (apt-get
# download after dpkg --add-architecture arm64), cached in
# $LINEMQ_APPLIANCE_CACHE (default ~/.cache/linemq-appliance).
# Needs qemu-system-arm, cpio, curl, mosquitto-clients, python3, openssl,
# Go (the helpers); checked first (needs.sh). appliance-test.sh --needs only checks.
set -euo pipefail

"$(dirname "$0")/needs.sh" appliance-test \
	qemu-system-aarch64:qemu-system-arm cpio:cpio gzip:gzip curl:curl \
	mosquitto_sub:mosquitto-clients mosquitto_pub:mosquitto-clients python3:python3 openssl:openssl \
	dpkg:dpkg apt-get:apt
[ "${1-}" = --needs ] && exit 0

bin=$(realpath "${1:?usage: appliance-test.sh BINARY}")
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${LINEMQ_APPLIANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/linemq-appliance}
work=$(mktemp -d /tmp/linemq-appliance.XXXXXX)
qpid=
cleanup() {
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then kill "$qpid"; fi
	jobs -p | xargs -r kill 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
step() { echo "== $*"; }
fail() {
	echo "appliance-test: FAIL: $*"
	echo "--- guest console (last 40 lines)"
	tail -40 "$work/console.log" 2>/dev/null || true
	exit 1
}

# --- the kernel and busybox, from Debian's arm64 packages (cached)
# shellcheck source=guest-kernel.sh
. "$repo/scripts/appliance/guest-kernel.sh"
guest_kernel "$cache" "${GUEST_MODULES[@]}" || fail "no guest kernel"
step "kernel $(cat "$cache/kernel-package"), busybox $(file -b "$cache/busybox" 2>/dev/null | cut -d, -f1-2 || echo static)"

# --- the initramfs
step "initramfs: busybox, modules, linemq, the appliance configuration"
root=$work/root
mkdir -p "$root"/{bin,dev,proc,sys,tmp,run,etc/linemq,lib/modules,usr/bin,var/lib/linemq}
cp "$cache/busybox" "$root/bin/busybox"
for m in failover net_failover virtio_mmio virtio_net softdog; do cp "$cache/modules/$m.ko" "$root/lib/modules/"; done
install -m 0755 "$bin" "$root/usr/bin/linemq"
# The test-only PL061 check (scripts/appliance/gpiocheck), for arm64.
(cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -trimpath -o "$root/usr/bin/gpiocheck" ./scripts/appliance/gpiocheck)
# The factory configuration, plus the kernel watchdog the way a board
# without systemd's RuntimeWatchdogSec= would use it: softdog, 5 s.
# The factory configuration in /etc/linemq, plus the kernel watchdog as a
# board without systemd's RuntimeWatchdogSec= would use it (softdog, 5 s).
# The gateway's own file on the "boot partition" (a directory here) names
# the node; the appliance's apply-config script applies it at boot. The
# second boot gets a bad one instead (kernel argument linemq.boot=bad).
overlay=$repo/buildroot/board/linemq/common/rootfs-overlay
{
	cat "$overlay/etc/linemq/linemq.yaml"
	printf '  watchdog: {device: /dev/watchdog, timeout: 5s}\n'
	# The host reaches the guest from 10.0.2.2: not this machine, so
	# anonymous clients need letting in (the factory default is loopback
	# only).
	printf 'auth:\n  allow_anonymous: true\n'
} >"$root/etc/linemq/linemq.yaml"
install -D -m 0755 "$overlay/usr/libexec/linemq/apply-config" "$root/usr/libexec/linemq/apply-config"
mkdir -p "$root/boot" "$root/testdata"
# The first boot's file also puts the status LED on line 4 of the virt
# board's PL061 (gpiochip0; line 3 is the power button's input in QEMU's
# device tree), not optional: linemq must drive it through periph.io's
# gpioioctl or refuse to start.
{
	echo "node_id: appliance-qemu-1"
	grep -v '^ *#' "$repo/buildroot/board/linemq/common/boot-linemq.yaml" | grep -v '^$' |
		sed 's|status: {sysfs: ACT, optional: true}|status: {gpio: gpiochip0/4}|'
	printf '  watchdog: {device: /dev/watchdog, timeout: 5s}\n'
	printf 'auth:\n  allow_anonymous: true\n'
} >"$root/testdata/good.yaml"
# The third boot's provisioning set locks the gateway down: passwords,
# an ACL, a TLS listener (the host's clients verify it with the plant CA),
# a static address, host name and NTP server. The second boot's is the
# same set with one bad ACL line: refused whole.
mkset() { # mkset DIR NODE ACL
	local d=$1
	mkdir -p "$d/linemq/tls" "$d/linemq/network"
	cat >"$d/linemq.yaml" <<YAML
node_id: $2
mqtt:
  listen: ":1883"
http:
  listen: ":8080"
auth:
  allow_anonymous: false
  password_file: /etc/linemq/passwd
  acl_file: /etc/linemq/acl
listeners:
  - type: tls
    address: ":8883"
    cert_file: /etc/linemq/tls/server.crt
    key_file: /etc/linemq/tls/server.key
    ca_file: /etc/linemq/tls/ca.crt
hw:
  watchdog: {device: /dev/watchdog, timeout: 5s}
YAML
	cp "$pki/passwd" "$d/linemq/passwd"
	printf '%b' "$3" >"$d/linemq/acl"
	cp "$pki/server.crt" "$pki/server.key" "$pki/ca.crt" "$d/linemq/tls/"
	printf '[Match]\nName=eth0\n\n[Network]\nAddress=10.0.2.15/24\nGateway=10.0.2.2\n' >"$d/linemq/network/eth0.network"
	echo "$2" >"$d/linemq/hostname"
	echo 10.0.2.2 >"$d/linemq/ntp.txt"
}
pki=$work/pki
mkdir -p "$pki"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=plant CA" \
	-keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=appliance-qemu-3" \
	-keyout "$pki/server.key" -out "$pki/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$pki/ext"
openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
	-extfile "$pki/ext" -out "$pki/server.crt" 2>/dev/null
(cd "$repo" && go build -o "$work/linemq-host" ./cmd/linemq)
echo s3cret | "$work/linemq-host" passwd -c -stdin "$pki/passwd" scada >/dev/null
mkset "$root/testdata/secure" appliance-qemu-3 'user scada\ntopic readwrite appliance/#\n'
mkset "$root/testdata/bad" appliance-qemu-2 'user scada\ntopic readwrite appliance/#\ntopic sometimes appliance/x\n'
echo "  boot partition's linemq.yaml, first boot:"
sed 's/^/  | /' "$root/testdata/good.yaml"
echo "  second boot: a provisioning set with a bad ACL line; third boot: the same set, good:"
(cd "$root/testdata/secure" && find . -type f | sort | sed 's/^/  | /')
printf 'root:x:0:0:root:/:/bin/sh\nlinemq:x:999:999::/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nlinemq:x:999:\ngpio:x:998:linemq\n' >"$root/etc/group"
cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tmpfs -o size=64m,mode=0750 tmpfs /var/lib/linemq
mount -t debugfs debugfs /sys/kernel/debug
for m in failover net_failover virtio_mmio virtio_net softdog; do
	insmod /lib/modules/$m.ko || echo "appliance-init: insmod $m failed"
done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
hostname linemq-qemu
echo "appliance-init: $(uname -r), $(ls /dev/watchdog* | tr '\n' ' ')"
case $(cat /proc/cmdline) in
*linemq.boot=bad*) cp -r /testdata/bad/. /boot/ ;;
*linemq.boot=secure*) cp -r /testdata/secure/. /boot/ ;;
*) cp /testdata/good.yaml /boot/linemq.yaml ;;
esac
# What tmpfiles.d and linemq-config.service do on the appliance.
mkdir -p -m 0750 /var/lib/linemq/config
chgrp linemq /var/lib/linemq/config
/usr/libexec/linemq/apply-config
(cd /boot && find . -type f) | sed 's|^\./|appliance-init: boot partition: |'
ls /run/systemd/network /run/systemd/timesyncd.conf.d 2>/dev/null | sed 's/^/appliance-init: run: /'
echo "appliance-init: host name $(hostname)"
/usr/bin/linemq -config /etc/linemq/linemq.yaml -data-dir /var/lib/linemq &
pid=$!
echo "appliance-init: linemq pid $pid"
# The test-only control: one word per connection on port 7000.
while true; do
	cmd=$(nc -l -p 7000 | head -1)
	case $cmd in
	freeze)
		echo "appliance-init: freezing linemq (SIGSTOP): nothing feeds the watchdog now"
		kill -STOP "$pid"
		;;
	gpio)
		# The status LED on the PL061: held by linemq, blinking; and a
		# spare line driven and read back through periph.io.
		/usr/bin/gpiocheck -chip pl061 -watch 4 -for 3s -roundtrip 5
		;;
	stepfwd | stepback)
		# A wall-clock step, as NTP's first answer makes on a board
		# without a real-time clock: a year forward, or back.
		d=31536000
		[ "$cmd" = stepback ] && d=-31536000
		date -s "@$(($(date +%s) + d))" >/dev/null
		echo "appliance-init: clock stepped ($cmd) to $(date -u '+%Y-%m-%d %H:%M:%S')"
		;;
	restart1970)
		# The next boot of a board whose clock starts at 1970: linemq
		# stops, the clock goes back to 1970, linemq starts on the same
		# data.
		kill -TERM "$pid"
		wait "$pid"
		date -s @86400 >/dev/null
		echo "appliance-init: clock set to $(date -u '+%Y-%m-%d %H:%M:%S'); starting linemq again"
		/usr/bin/linemq -config /etc/linemq/linemq.yaml -data-dir /var/lib/linemq &
		pid=$!
		;;
	fill)
		dd if=/dev/zero of=/var/lib/linemq/fill bs=1M 2>/dev/null
		echo "appliance-init: data partition full: $(df -k /var/lib/linemq | tail -1)"
		;;
	*) echo "appliance-init: unknown control '$cmd'" ;;
	esac
done
INIT
chmod 0755 "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet) | gzip -1 >"$work/initrd.gz"
echo "  initrd $(du -h "$work/initrd.gz" | cut -f1)"

# --- boot
elapsed() { echo "$(date +%s.%N) $start" | awk '{ printf "%.1f", $1 - $2 }'; }
boot() {
	read -r mqtt mqtts http ctl <<<"$(free_ports 4)"
	step "booting: qemu-system-aarch64 -M virt (MQTT 127.0.0.1:$mqtt, HTTP 127.0.0.1:$http, control 127.0.0.1:$ctl)"
	start=$(date +%s.%N)
	qemu-system-aarch64 -M virt -cpu cortex-a53 -smp 2 -m 512 -nographic -no-reboot \
		-kernel "$cache/vmlinuz" -initrd "$work/initrd.gz" \
		-append "console=ttyAMA0 panic=-1 loglevel=4 ${1:-}" \
		-netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$mqtt-:1883,hostfwd=tcp:127.0.0.1:$mqtts-:8883,hostfwd=tcp:127.0.0.1:$http-:8080,hostfwd=tcp:127.0.0.1:$ctl-:7000" \
		-device virtio-net-device,netdev=n0 \
		</dev/null >"$work/console.log" 2>&1 &
	qpid=$!
	local deadline=$((SECONDS + ${APPLIANCE_BOOT_TIMEOUT:-120}))
	until curl -fsS -o /dev/null "http://127.0.0.1:$http/readyz" 2>/dev/null; do
		kill -0 "$qpid" 2>/dev/null || fail "QEMU exited during boot"
		[ $SECONDS -lt $deadline ] || fail "no /readyz within ${APPLIANCE_BOOT_TIMEOUT:-120} s"
		sleep 0.5
	done
	echo "  ready after $(elapsed) s"
}
control() { # a word for the guest's test-only control port
	exec 3<>"/dev/tcp/127.0.0.1/$ctl"
	echo "$1" >&3
	sleep 1
	exec 3>&-
}
wait_reset() { # the guest must be reset by softdog within 30 s
	local t0=$SECONDS deadline=$((SECONDS + 30))
	while kill -0 "$qpid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
	kill -0 "$qpid" 2>/dev/null && fail "the guest was not reset within 30 s"
	wait "$qpid" || true
	qpid=
	grep -q 'softdog: Initiating system reboot' "$work/console.log" || fail "QEMU exited, but not by softdog"
	reset_after=$((SECONDS - t0))
}

boot
grep -E 'appliance-init|linemq-config|msg=ready|gateway started|msg="hardware|watchdog' "$work/console.log" | sed 's/^/  | /' | cut -c1-200
grep -q 'linemq provision: applied linemq.yaml' "$work/console.log" || fail "the boot partition's linemq.yaml was not applied"
grep -q 'gateway started.*node_id=appliance-qemu-1' "$work/console.log" || fail "linemq did not run with the applied configuration"
grep -q 'appliance-init: boot partition: linemq-applied.txt' "$work/console.log" || fail "no linemq-applied.txt on the boot partition"
echo "  first boot: /boot/linemq.yaml checked, applied (node_id appliance-qemu-1, the watchdog) and removed"

step "/readyz and the status page"
code=$(curl -s -o "$work/readyz" -w '%{http_code}' "http://127.0.0.1:$http/readyz")
[ "$code" = 200 ] || fail "/readyz answered $code"
echo "  /readyz: $code $(head -c 200 "$work/readyz" | tr '\n' ' ')"
code=$(curl -s -o "$work/status.html" -w '%{http_code}' "http://127.0.0.1:$http/")
if [ "$code" != 200 ] || ! grep -qi linemq "$work/status.html"; then fail "status page answered $code"; fi
echo "  /: $code, $(wc -c <"$work/status.html") bytes, title: $(sed -n 's/.*<title>\(.*\)<\/title>.*/\1/p' "$work/status.html" | head -1)"

step "MQTT round trip through the hostfwd port"
mosquitto_sub -h 127.0.0.1 -p "$mqtt" -V 5 -q 1 -i rt-sub -t appliance/rt -C 1 -W 30 >"$work/rt" &
rtsub=$!
sleep 1
mosquitto_pub -h 127.0.0.1 -p "$mqtt" -V 5 -q 1 -i rt-pub -t appliance/rt -m "hello from the host"
wait "$rtsub" || fail "round trip: nothing received"
[ "$(cat "$work/rt")" = "hello from the host" ] || fail "round trip: got '$(cat "$work/rt")'"
echo "  appliance/rt: sent and received \"$(cat "$work/rt")\""

step "status LED on the emulated PL061 (gpiochip0 line 4): driven by linemq through periph.io's gpioioctl, read back in the guest"
grep -q 'msg=hardware .*board="linux,dummy-virt' "$work/console.log" || fail "no hardware line from linemq"
grep 'msg=hardware ' "$work/console.log" | grep -q 'leds="status=simulated' && fail "linemq simulated its status LED instead of driving gpiochip0/4"
control gpio
deadline=$((SECONDS + 20))
until grep -qE 'gpiocheck: (PASS|FAIL)' "$work/console.log"; do
	[ $SECONDS -lt $deadline ] || fail "no answer from gpiocheck within 20 s"
	sleep 0.5
done
grep -E '^gpiocheck:' "$work/console.log" | sed 's/^/  | /' | cut -c1-240
grep -q 'gpiocheck: PASS' "$work/console.log" || fail "the status LED's PL061 line: $(grep 'gpiocheck: FAIL' "$work/console.log")"

step "shared subscription: \$share/workers/appliance/jobs, two members, six messages"
for m in 1 2; do
	mosquitto_sub -h 127.0.0.1 -p "$mqtt" -V 5 -q 1 -i "worker-$m" -t "\$share/workers/appliance/jobs" -W 20 >"$work/w$m" 2>/dev/null &
done
sleep 2
for i in 1 2 3 4 5 6; do
	mosquitto_pub -h 127.0.0.1 -p "$mqtt" -V 5 -q 1 -i job-pub -t appliance/jobs -m "job-$i"
done
deadline=$((SECONDS + 20))
while [ "$(cat "$work/w1" "$work/w2" | wc -l)" -lt 6 ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
sleep 0.5
n1=$(wc -l <"$work/w1")
n2=$(wc -l <"$work/w2")
dups=$(cat "$work/w1" "$work/w2" | sort | uniq -d | wc -l)
echo "  worker-1 got $n1 ($(tr '\n' ' ' <"$work/w1")), worker-2 got $n2 ($(tr '\n' ' ' <"$work/w2"))"
if [ $((n1 + n2)) -ne 6 ] || [ "$dups" -ne 0 ]; then
	fail "shared group: want 6 messages, each once; got $n1 + $n2, $dups duplicated"
fi
if [ "$n1" -eq 0 ] || [ "$n2" -eq 0 ]; then fail "shared group: one member got nothing"; fi

step "clock steps: 100 clients across a year forward and back, expiry on the monotonic clock, a start at 1970"
(cd "$repo" && go build -o "$work/clockcheck" ./scripts/appliance/clockcheck)
"$work/clockcheck" -mqtt "127.0.0.1:$mqtt" -ctl "127.0.0.1:$ctl" -http "127.0.0.1:$http" | sed 's/^/  /'
[ "${PIPESTATUS[0]}" = 0 ] || fail "clock steps"
grep -E 'clock stepped|clock set to|clock is behind' "$work/console.log" | sed 's/^/  | /' | cut -c1-220
grep -q 'the clock is behind the newest time in the store' "$work/console.log" || fail "linemq did not notice it started with its clock behind its data"

step "watchdog: freeze linemq (a hung process), softdog must reset the guest"
control freeze
wait_reset
grep -E 'freezing|softdog' "$work/console.log" | sed 's/^/  | /' | cut -c1-160
echo "  reset by softdog ${reset_after} s after the freeze (timeout 5 s); QEMU exited (-no-reboot)"

step "a provisioning set with a bad ACL line is refused whole; the health gate: fill the data partition, storage fails, feeding stops, softdog resets"
boot linemq.boot=bad
grep -E 'linemq-config|boot partition|gateway started' "$work/console.log" | sed 's/^/  | /' | cut -c1-200
grep -E 'linemq provision|linemq/acl' "$work/console.log" | sed 's/^/  | /' | cut -c1-200
grep -q 'linemq-config: provisioning set in /boot refused' "$work/console.log" || fail "the set with a bad ACL line was not refused"
grep -q 'linemq/acl:3: unknown access "sometimes"' "$work/console.log" || fail "the refusal does not name the ACL's line"
grep -q 'appliance-init: boot partition: linemq-error.txt' "$work/console.log" || fail "no linemq-error.txt on the boot partition"
grep -q 'appliance-init: boot partition: linemq/acl' "$work/console.log" || fail "the refused set did not stay on the boot partition to be fixed"
grep -q 'appliance-init: run: ' "$work/console.log" && fail "a refused set's network or NTP files reached /run"
grep -q 'gateway started.*node_id=linemq-qemu' "$work/console.log" || fail "linemq did not keep the factory configuration"
curl -s "http://127.0.0.1:$http/api/v1/status" >"$work/status.json"
python3 - "$work/status.json" <<'PY' || fail "the status API does not show the refused set as a degraded provisioning check"
import json, sys
checks = {c["name"]: c for c in json.load(open(sys.argv[1]))["health"]["checks"]}
c = checks["provisioning"]
assert c["state"] == "degraded" and "linemq/acl:3" in c["reason"], c
print("  status page: provisioning " + c["state"] + ": " + c["reason"][:110])
PY
echo "  refused whole (linemq-error.txt names linemq/acl:3), nothing applied: the factory configuration kept"
# A persistent session whose messages must be stored, then the disk fills.
mosquitto_sub -h 127.0.0.1 -p "$mqtt" -V 5 -q 1 -c -x 3600 -i keeper -t appliance/keep -W 2 >/dev/null 2>&1 || true
t_fill=$SECONDS
control fill
# Publish until linemq says it stopped feeding (its storage check runs every
# 5 s), for at most 60 s: on a loaded machine the emulated guest is slow.
while [ $((SECONDS - t_fill)) -lt 60 ]; do
	head -c 200000 /dev/zero | tr '\0' x |
		mosquitto_pub -h 127.0.0.1 -p "$mqtt" -V 5 -q 1 -i filler -t appliance/keep -s >/dev/null 2>&1 || true
	kill -0 "$qpid" 2>/dev/null || break
	if grep -q 'not feeding' "$work/console.log"; then break; fi
done
readyz=$(curl -s --max-time 2 -w ' (%{http_code})' "http://127.0.0.1:$http/readyz" 2>/dev/null | tr '\n' ' ' || true)
wait_reset
grep -E 'data partition full|health: failed|not feeding|softdog' "$work/console.log" | sed 's/^/  | /' | cut -c1-220
grep -q 'not feeding' "$work/console.log" || fail "linemq did not stop feeding the watchdog"
echo "  /readyz while failing: ${readyz:-no answer}"
echo "  reset by softdog $((SECONDS - t_fill)) s after the data partition was filled; QEMU exited (-no-reboot)"

step "a provisioning set locks the gateway down: passwords, ACL, TLS, static address; its secrets leave the boot partition"
boot linemq.boot=secure
grep -E 'linemq provision|linemq-config|boot partition|appliance-init: (run|host)|gateway started' "$work/console.log" | sed 's/^/  | /' | cut -c1-200
grep -q 'linemq provision: applied linemq.yaml, linemq/acl' "$work/console.log" || fail "the provisioning set was not applied"
grep -q 'gateway started.*node_id=appliance-qemu-3' "$work/console.log" || fail "linemq did not run with the provisioned configuration"
if grep -E 'appliance-init: boot partition: (linemq\.yaml|linemq/)' "$work/console.log"; then fail "files of the applied set stay on the boot partition"; fi
grep -q 'appliance-init: boot partition: linemq-applied.txt' "$work/console.log" || fail "no linemq-applied.txt on the boot partition"
grep -q 'appliance-init: run: 10-linemq-eth0.network' "$work/console.log" || fail "the static address's .network file did not reach /run/systemd/network"
grep -q 'appliance-init: run: 10-linemq.conf' "$work/console.log" || fail "the NTP server did not reach timesyncd's configuration"
grep -q 'appliance-init: host name appliance-qemu-3' "$work/console.log" || fail "the host name was not set"
if mosquitto_pub -h 127.0.0.1 -p "$mqtt" -V 5 -q 1 -i anon -t appliance/x -m hi 2>"$work/anon"; then
	fail "an anonymous client was accepted"
fi
echo "  anonymous: refused ($(tr '\n' ' ' <"$work/anon" | cut -c1-80))"
if mosquitto_pub -h 127.0.0.1 -p "$mqtts" --cafile "$pki/ca.crt" -V 5 -q 1 -i wrong -u scada -P guess -t appliance/x -m hi 2>"$work/wrong"; then
	fail "a wrong password was accepted"
fi
echo "  TLS with a wrong password: refused ($(tr '\n' ' ' <"$work/wrong" | cut -c1-80))"
mosquitto_sub -h 127.0.0.1 -p "$mqtts" --cafile "$pki/ca.crt" -V 5 -q 1 -i sec-sub -u scada -P s3cret -t appliance/secure -C 1 -W 30 >"$work/sec" &
secsub=$!
sleep 2
mosquitto_pub -h 127.0.0.1 -p "$mqtts" --cafile "$pki/ca.crt" -V 5 -q 1 -i sec-pub -u scada -P s3cret -t appliance/secure -m "over TLS" ||
	fail "the TLS client with the plant CA and its password was refused"
wait "$secsub" || fail "TLS round trip: nothing received"
[ "$(cat "$work/sec")" = "over TLS" ] || fail "TLS round trip: got '$(cat "$work/sec")'"
echo "  TLS (plant CA) with user and password: round trip \"$(cat "$work/sec")\""
kill "$qpid" 2>/dev/null || true
wait "$qpid" 2>/dev/null || true
qpid=

echo
echo "appliance-test: first-boot configuration (applied and rejected), a provisioning set (passwords, ACL, TLS, static address, host name, NTP; refused whole with one bad line, applied whole and gone from the boot partition), /readyz, status page, MQTT round trip, status LED on the PL061, shared group, watchdog reset of a hung broker and of a failing health check passed"
