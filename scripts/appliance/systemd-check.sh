#!/bin/sh
# systemd-check.sh [THRESHOLD]
#
# Checks the units as a systemd system would load them: stages the package
# and the appliance overlay into a temporary root (stage-rootfs.sh), adds
# this machine's own systemd units (the targets and services ours are
# ordered against), then
#   - systemd-analyze verify --root: fails on ANY output (it exits 0 on
#     warnings such as an unknown key);
#   - systemd-sysusers and systemd-tmpfiles --root: the user, its groups and
#     the state directory are created as at boot;
#   - systemd-analyze security --offline: fails above THRESHOLD (in tenths:
#     15 is an exposure level of 1.5).
# Needs systemd (systemd-analyze, systemd-sysusers, systemd-tmpfiles,
# systemctl); checked first (needs.sh). systemd-check.sh --needs only
# checks.
set -eu

"$(dirname "$0")/needs.sh" systemd-check \
	systemd-analyze:systemd systemd-sysusers:systemd systemd-tmpfiles:systemd systemctl:systemd
[ "${1-}" = --needs ] && exit 0

threshold=${1:-15}
here=$(cd "$(dirname "$0")" && pwd)
st=$(mktemp -d /tmp/linemq-systemd-check.XXXXXX)
trap 'rm -rf "$st"' EXIT

"$here/stage-rootfs.sh" "$st"
# The tryboot boards' overlay (RAUC's trial gate).
cp -a "$here/../../buildroot/board/linemq/tryboot/rootfs-overlay/." "$st/"
# The distribution's own units (targets, systemd-tmpfiles-setup.service).
cp -an /usr/lib/systemd/system/. "$st/usr/lib/systemd/system/"

echo "== systemd-analyze verify --root=<staging> linemq.service linemq-config.service linemq-os-trial.service"
if ! out=$(systemd-analyze verify --root="$st" linemq.service linemq-config.service linemq-os-trial.service 2>&1) || [ -n "$out" ]; then
	echo "$out"
	echo "systemd-check: systemd-analyze verify reported problems"
	exit 1
fi
echo "clean"

echo "== systemd-sysusers, systemd-tmpfiles --create (--root=<staging>)"
mkdir -p "$st/etc"
: >"$st/etc/passwd"; : >"$st/etc/group"
# systemd's own users, which the appliance's tmpfiles.d names
# (systemd-timesync owns its saved clock's directory).
mkdir -p "$st/usr/lib/sysusers.d"
cp -n /usr/lib/sysusers.d/systemd-timesync.conf "$st/usr/lib/sysusers.d/" 2>/dev/null ||
	echo 'u systemd-timesync - "systemd Time Synchronization"' >"$st/usr/lib/sysusers.d/systemd-timesync.conf"
systemd-sysusers --root="$st" 2>&1
grep '^linemq:' "$st/etc/passwd"
grep -E '^gpio:.*linemq' "$st/etc/group"
systemd-tmpfiles --root="$st" --create linemq.conf linemq-appliance.conf 2>&1
uid=$(awk -F: '$1 == "linemq" { print $3 }' "$st/etc/passwd")
got=$(stat -c '%a %u' "$st/var/lib/linemq")
if [ "$got" != "750 $uid" ]; then
	echo "systemd-check: /var/lib/linemq is $got (mode uid), want 750 $uid"
	exit 1
fi
gid=$(awk -F: '$1 == "linemq" { print $3 }' "$st/etc/group")
got=$(stat -c '%a %u %g' "$st/var/lib/linemq/config")
if [ "$got" != "750 0 $gid" ]; then
	echo "systemd-check: /var/lib/linemq/config is $got (mode uid gid), want 750 0 $gid"
	exit 1
fi
got=$(stat -c '%a %u' "$st/var/lib/linemq/timesync" 2>/dev/null || true)
st_uid=$(awk -F: '$1 == "systemd-timesync" { print $3 }' "$st/etc/passwd")
if [ "$got" != "755 $st_uid" ]; then
	echo "systemd-check: /var/lib/linemq/timesync is '$got' (mode user), want 755 systemd-timesync"
	exit 1
fi
echo "/var/lib/linemq 0750 linemq, /var/lib/linemq/config 0750 root:linemq, /var/lib/linemq/timesync 0755 systemd-timesync"

echo "== systemd-analyze security --offline=true --threshold=$threshold linemq.service"
if ! systemd-analyze security --offline=true --root="$st" --threshold="$threshold" linemq.service >"$st/security.txt" 2>&1; then
	grep -E '^✗|Overall' "$st/security.txt"
	echo "systemd-check: exposure above $threshold"
	exit 1
fi
grep -E '^✗' "$st/security.txt" | sed 's/  */ /g'
grep Overall "$st/security.txt"
