#!/bin/sh
# needs.sh WHO COMMAND:PACKAGE...
#
# Checks, before a target starts work, that every COMMAND it will run (or
# that a tool it runs will call, such as genimage's mkfs.vfat and mcopy) is
# on PATH. If any is missing it prints one line naming them all and the
# Debian packages that provide them, and exits 1:
#   sdimage-smoke: needs genimage mcopy (apt-get install genimage mtools)
# so that a run fails at once instead of half-way through, after minutes
# of building, on "command not found". A command found in /usr/sbin or
# /sbin but not on PATH is named as such: installing the package again
# would not help.
set -eu

who=${1:?usage: needs.sh WHO COMMAND:PACKAGE...}
shift
missing= pkgs= sbin=
for cp in "$@"; do
	c=${cp%%:*}
	p=${cp#*:}
	command -v "$c" >/dev/null 2>&1 && continue
	for d in /usr/sbin /sbin; do
		if [ -x "$d/$c" ]; then
			sbin="$sbin $d/$c"
			continue 2
		fi
	done
	case " $missing " in *" $c "*) ;; *) missing="$missing $c" ;; esac
	case " $pkgs " in *" $p "*) ;; *) pkgs="$pkgs $p" ;; esac
done
if [ -n "$missing" ]; then
	echo "$who: needs$missing (apt-get install$pkgs)" >&2
fi
if [ -n "$sbin" ]; then
	echo "$who: needs$sbin on PATH (add /usr/sbin and /sbin to PATH)" >&2
fi
[ -z "$missing$sbin" ]
