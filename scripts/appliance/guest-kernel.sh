# guest-kernel.sh: sourced by appliance-test.sh, powercut-test.sh and
# systemd-test.sh, which boot the guest.
#
# Every module the scripts load, fetched together so that a fresh
# machine downloads the kernel package once; in an order that loads each
# after the modules it needs (systemd-test's initramfs follows it).
GUEST_MODULES=(failover net_failover virtio_mmio virtio_net softdog virtio_blk crc16 mbcache jbd2 crc32c_generic ext4 fat vfat nls_cp437 nls_ascii nls_utf8)

# guest_kernel CACHE MODULE...: makes sure CACHE holds Debian's arm64 kernel
# (vmlinuz), busybox (static, arm64) and the named kernel modules
# (CACHE/modules/NAME.ko), fetching them with apt-get download after
# dpkg --add-architecture arm64 when something is missing. A cache filled
# for fewer modules (an older script) is topped up from the same kernel
# package, so every module matches the cached kernel.
guest_kernel() {
	local cache=$1
	shift
	local m missing=()
	if [ -f "$cache/ok" ]; then
		for m in "$@"; do [ -f "$cache/modules/$m.ko" ] || missing+=("$m"); done
		[ ${#missing[@]} -eq 0 ] && return 0
		echo "== kernel cache $cache: adding modules ${missing[*]}"
	else
		echo "== fetching Debian's arm64 kernel and busybox into $cache"
	fi
	dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
	apt-get update -qq
	local kpkg
	if [ -f "$cache/ok" ]; then
		kpkg=$(cat "$cache/kernel-package")
	else
		kpkg=$(apt-cache depends linux-image-arm64:arm64 | sed -n 's/^ *Depends: \(linux-image-[^:]*-arm64\).*/\1/p' | head -1)
		[ -n "$kpkg" ] || { echo "guest-kernel: no linux-image-*-arm64 package found"; return 1; }
		rm -rf "$cache"
	fi
	local tmp
	tmp=$(mktemp -d /tmp/linemq-kernel.XXXXXX)
	mkdir -p "$cache/modules" "$tmp/deb" "$tmp/x"
	(
		cd "$tmp/deb"
		if [ -f "$cache/ok" ]; then
			apt-get download "$kpkg:arm64"
		else
			apt-get download "$kpkg:arm64" busybox-static:arm64
		fi 2>&1 | grep -v '^W: Download is performed unsandboxed' || true
	)
	for d in "$tmp"/deb/*.deb; do dpkg -x "$d" "$tmp/x"; done
	local ver
	ver=$(ls "$tmp/x/lib/modules")
	for m in "$@"; do
		find "$tmp/x/lib/modules/$ver" -name "$m.ko" -exec cp {} "$cache/modules/" \;
		[ -f "$cache/modules/$m.ko" ] || { echo "guest-kernel: no module $m.ko in $kpkg"; rm -rf "$tmp"; return 1; }
	done
	if [ ! -f "$cache/ok" ]; then
		cp "$tmp/x/boot/vmlinuz-$ver" "$cache/vmlinuz"
		cp "$tmp/x/bin/busybox" "$cache/busybox"
		echo "$kpkg" >"$cache/kernel-package"
		touch "$cache/ok"
	fi
	rm -rf "$tmp"
}

# free_ports N: N distinct loopback ports the OS hands out, all held open
# until each is known (a port closed at once may be handed out again by
# the next call: CI saw HTTP and the control port given the same one).
free_ports() { python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"; }
