#!/bin/sh
# check-config.sh BINARY FILE...
#
# Checks each linemq configuration with the real linemq binary (run under
# qemu-user when it is an ARM build): it must load, validate and start a
# broker (on loopback ports, in a temporary data directory) up to its
# "ready" line, then stop cleanly on SIGTERM with exit status 0.
set -eu

bin=${1:?usage: check-config.sh BINARY FILE...}
shift
run=
case $(go version -m "$bin" 2>/dev/null | awk '$2 == "GOARCH=arm64" { print "arm64" } $2 == "GOARCH=arm" { print "arm" }') in
arm64) [ "$(uname -m)" = aarch64 ] || run=qemu-aarch64-static ;;
arm) case $(uname -m) in arm*) ;; *) run=qemu-arm-static ;; esac ;;
esac

for f in "$@"; do
	tmp=$(mktemp -d /tmp/linemq-check-config.XXXXXX)
	$run "$bin" -config "$f" -data-dir "$tmp/data" -mqtt-listen 127.0.0.1:0 -http-listen 127.0.0.1:0 \
		>"$tmp/log" 2>&1 &
	pid=$!
	i=0
	while ! grep -q 'msg=ready' "$tmp/log" && kill -0 "$pid" 2>/dev/null && [ $i -lt 300 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -TERM "$pid" 2>/dev/null || true
	rc=0
	wait "$pid" || rc=$?
	if ! grep -q 'msg=ready' "$tmp/log" || [ "$rc" -ne 0 ]; then
		cat "$tmp/log"
		echo "check-config: $f: linemq did not start and stop cleanly (exit status $rc)"
		rm -rf "$tmp"
		exit 1
	fi
	echo "config ok: $f ($(grep -o 'msg=ready.*' "$tmp/log" | cut -c1-120))"
	rm -rf "$tmp"
done
