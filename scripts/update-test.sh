#!/usr/bin/env bash
# make update-test: a line of three gateways upgraded one at a time under
# QoS 1 load, from the previous commit's build to this tree's
# (cmd/linemq TestRollingUpgrade with LINEMQ_UPDATE_FROM; docs/updates.md).
# UPDATE_FROM names another commit to start from; it must have the line's
# update lock (commit facdc79 and later).
set -euo pipefail
cd "$(dirname "$0")/.."
from=${UPDATE_FROM:-HEAD~1}
rev=$(git rev-parse --verify "$from^{commit}")
if ! git merge-base --is-ancestor facdc79 "$rev" 2>/dev/null; then
  echo "update-test: $from ($rev) predates the line's update lock (facdc79); set UPDATE_FROM" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
git archive "$rev" | tar -x -C "$work"
version="$(git describe --tags --always "$rev")-from"
echo "update-test: building $from ($version)"
(cd "$work" && go build -trimpath -ldflags "-X main.version=$version" -o "$work/linemq-from" ./cmd/linemq)
# The gateways' own log lines are kept (a failure prints them), etcd's
# chatter is not.
LINEMQ_UPDATE_FROM="$work/linemq-from" go test -count=1 -timeout 10m -v -run '^TestRollingUpgrade$' ./cmd/linemq |
  grep -v '^        time=.*component=etcd' || exit 1
