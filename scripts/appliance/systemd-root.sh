# systemd-root.sh: sourced by systemd-test.sh.
#
# Assembles the appliance's root file system from Debian's arm64 packages,
# because Buildroot cannot build here (no network for its downloads): the
# same layout (merged /usr, read-only root, /var a tmpfs, the boot and data
# partitions in /etc/fstab from post-build.sh) and the same units (the
# package's and the overlay's, laid out by stage-rootfs.sh and enabled by
# presets), with systemd as PID 1. What differs from the Buildroot image is
# listed in docs/appliance.md ("The appliance under systemd, emulated").

# The packages whose closure (Depends and Pre-Depends, no Recommends) makes
# the root: systemd with networkd, timesyncd, udev, dropbear, and busybox
# for the shell and the small tools, as Buildroot's image has.
SYSTEMD_ROOT_PACKAGES=(systemd systemd-timesyncd udev dropbear-bin busybox-static)
# Packages the closure names that a root without a package manager does
# not need (dpkg's, debconf's and passwd's own dependencies).
SYSTEMD_ROOT_SKIP='^(cdebconf|dpkg|install-info|tar|passwd|libdebian-installer4|libnewt0.52|libslang2|libtextwrap1|libsemanage2|libsepol2|libdb5.3|libreadline8|libtinfo6)$'

# systemd_debs CACHE: CACHE/systemd-debs holds the packages' .deb files,
# fetched once with apt-get download (dpkg --add-architecture arm64 first).
systemd_debs() {
	local dir=$1/systemd-debs
	[ -f "$dir/ok" ] && return 0
	echo "== fetching Debian's arm64 systemd, udev, dropbear and busybox into $dir"
	dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
	apt-get update -qq
	local pkgs=() p
	local args=()
	for p in "${SYSTEMD_ROOT_PACKAGES[@]}"; do args+=("$p:arm64"); done
	while read -r p; do
		p=${p%:arm64}
		[[ $p =~ $SYSTEMD_ROOT_SKIP ]] || pkgs+=("$p:arm64")
	done < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances "${args[@]}" | grep -E '^[a-z0-9].*:arm64$' | sort -u)
	rm -rf "$dir"
	mkdir -p "$dir"
	(cd "$dir" && apt-get download "${pkgs[@]}" libaudit-common 2>&1 |
		grep -v '^W: Download is performed unsandboxed' || true)
	[ "$(ls "$dir"/*.deb | wc -l)" -ge ${#pkgs[@]} ] || { echo "systemd-root: not every package was fetched"; return 1; }
	touch "$dir/ok"
}

# systemd_root CACHE DEST BINARY: the root file system in DEST, with the
# arm64 linemq BINARY. DEST is made anew.
systemd_root() {
	local cache=$1 dest=$2 bin=$3
	local repo
	repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	systemd_debs "$cache" || return 1
	rm -rf "$dest"
	mkdir -p "$dest"
	local d
	for d in "$cache"/systemd-debs/*.deb; do dpkg-deb -x "$d" "$dest"; done
	# Merged /usr, as BR2_ROOTFS_MERGED_USR (which systemd needs) makes it.
	for d in bin sbin lib; do
		if [ -d "$dest/$d" ] && [ ! -L "$dest/$d" ]; then
			mkdir -p "$dest/usr/$d"
			cp -a "$dest/$d/." "$dest/usr/$d/"
			rm -rf "${dest:?}/$d"
		fi
		ln -sfn "usr/$d" "$dest/$d"
	done
	ln -sfn ../lib/systemd/systemd "$dest/usr/sbin/init"
	# busybox's applets where no package put the real program (the list
	# comes from busybox itself, run under qemu-user).
	local a
	for a in $(qemu-aarch64-static "$dest/usr/bin/busybox" --list); do
		case $a in init | linuxrc | '[[') continue ;; esac
		[ -e "$dest/usr/bin/$a" ] || [ -e "$dest/usr/sbin/$a" ] || ln -s busybox "$dest/usr/bin/$a"
	done
	# /var is a RAM disk on the appliance (BR2_INIT_SYSTEMD_VAR_FACTORY):
	# tmpfiles.d fills it at each boot.
	rm -rf "${dest:?}/var"
	mkdir -p "$dest/var"
	# /tmp a tmpfs: upstream systemd, and so Buildroot, installs tmp.mount
	# enabled; Debian leaves it aside.
	cp "$dest/usr/share/systemd/tmp.mount" "$dest/usr/lib/systemd/system/tmp.mount"
	mkdir -p "$dest/usr/lib/systemd/system/local-fs.target.wants"
	ln -sfn ../tmp.mount "$dest/usr/lib/systemd/system/local-fs.target.wants/tmp.mount"
	# No login prompt on the consoles: Debian's getty units want agetty,
	# which busybox does not replace (Buildroot's image runs busybox's
	# getty on the serial console; the test logs in over SSH).
	mkdir -p "$dest/etc/systemd/system"
	ln -sfn /dev/null "$dest/etc/systemd/system/getty@.service"
	ln -sfn /dev/null "$dest/etc/systemd/system/serial-getty@.service"
	# What Buildroot's skeleton and the defconfig give every image.
	mkdir -p "$dest"/{dev,proc,sys,run,tmp,root,etc/systemd/network}
	chmod 1777 "$dest/tmp"
	echo linemq >"$dest/etc/hostname"
	: >"$dest/etc/machine-id" # empty on a read-only root: systemd mounts a fresh one
	printf 'NAME="linemq appliance"\nID=linemq\nPRETTY_NAME="linemq appliance (Debian arm64 packages)"\n' >"$dest/usr/lib/os-release"
	ln -sfn ../usr/lib/os-release "$dest/etc/os-release"
	printf '[Match]\nName=eth0\n\n[Network]\nDHCP=yes\n' >"$dest/etc/systemd/network/dhcp.network" # BR2_SYSTEM_DHCP="eth0"
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$dest/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$dest/etc/group"
	printf 'root::19000:0:99999:7:::\n' >"$dest/etc/shadow"
	chmod 0600 "$dest/etc/shadow"
	# Buildroot's dropbear package: its unit, and host keys made at the
	# first start in /etc/dropbear, a link to /var/run/dropbear (which the
	# overlay's tmpfiles.d points at the data partition). Debian's
	# dropbear-bin has the programs only.
	ln -sfn /var/run/dropbear "$dest/etc/dropbear"
	cat >"$dest/usr/lib/systemd/system/dropbear.service" <<'UNIT'
[Unit]
Description=Dropbear SSH server
After=network.target

[Service]
ExecStart=/usr/sbin/dropbear -F -R -s
ExecReload=/bin/kill -HUP $MAINPID
KillMode=process
Restart=always

[Install]
WantedBy=multi-user.target
UNIT
	echo 'enable dropbear.service' >"$dest/usr/lib/systemd/system-preset/70-dropbear.preset"
	# The linemq package and the overlay, enabled by preset as Buildroot's
	# systemd package does; then the post-build script's fstab.
	"$repo/scripts/appliance/stage-rootfs.sh" "$dest" "$bin" || return 1
	"$repo/buildroot/board/linemq/common/post-build.sh" "$dest" qemu_aarch64 || return 1
	grep -q ' /var ' "$dest/etc/fstab" || echo "tmpfs /var tmpfs mode=0755,nosuid,nodev,size=32m 0 0" >>"$dest/etc/fstab"
	# The system users and groups, as Buildroot makes them at build time
	# (a read-only /etc cannot take them at boot).
	systemd-sysusers --root="$dest" >/dev/null 2>&1 || return 1
}
