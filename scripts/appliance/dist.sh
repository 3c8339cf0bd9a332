#!/bin/sh
# dist.sh VERSION OUTDIR [check]
#
# The source tarball the Buildroot package builds from:
# OUTDIR/linemq-VERSION.tar.gz, the committed tree (git archive HEAD) plus
# vendor/ from `go mod vendor`, made in a temporary copy (the repository
# itself is never vendored). Buildroot builds Go packages offline
# (GOPROXY=off, GOFLAGS=-mod=vendor) and skips its own vendoring step when
# the tarball already has vendor/.
# With "check", the tarball is unpacked again and linemq is cross-built
# from it the way Buildroot does: GOPROXY=off, -mod=vendor, an empty module
# cache, CGO_ENABLED=0, linux/arm64.
# Needs git (and tar, gzip, sha256sum, which every Debian has).
set -eu

"$(dirname "$0")/needs.sh" dist git:git tar:tar gzip:gzip sha256sum:coreutils

version=${1:?usage: dist.sh VERSION OUTDIR [check]}
out=${2:?usage: dist.sh VERSION OUTDIR [check]}
repo=$(cd "$(dirname "$0")/../.." && pwd)
name=linemq-$version
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d /tmp/linemq-dist.XXXXXX)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

mtime=$(git -C "$repo" log -1 --format=%ct HEAD)
git -C "$repo" archive --format=tar --prefix="$name/" HEAD | tar -x -C "$tmp"
(cd "$tmp/$name" && GOFLAGS=-mod=mod go mod vendor)
echo "$version" >"$tmp/$name/VERSION"
tar -C "$tmp" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
	-cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
echo "$out/$name.tar.gz: $(du -h "$out/$name.tar.gz" | cut -f1), $(tar -tzf "$out/$name.tar.gz" | grep -c "^$name/vendor/.*\.go$") vendored .go files"
sha256sum "$out/$name.tar.gz" | sed "s|$out/||" >"$out/$name.tar.gz.sha256"

if [ "${3:-}" = check ]; then
	mkdir "$tmp/check" "$tmp/modcache"
	tar -xzf "$out/$name.tar.gz" -C "$tmp/check"
	(cd "$tmp/check/$name" &&
		GOPROXY=off GOFLAGS=-mod=vendor GOMODCACHE="$tmp/modcache" GOWORK=off \
			CGO_ENABLED=0 GOOS=linux GOARCH=arm64 \
			go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$tmp/linemq" ./cmd/linemq)
	echo "built offline from the tarball (GOPROXY=off, -mod=vendor, empty module cache): $(go version "$tmp/linemq" | cut -d' ' -f2-)"
	go version -m "$tmp/linemq" | grep -E 'CGO_ENABLED|GOARCH' | sed 's/^[[:space:]]*/  /'
	if command -v qemu-aarch64-static >/dev/null; then
		echo "  $(qemu-aarch64-static "$tmp/linemq" -version)"
	fi
fi
