#!/usr/bin/env bash
# Runs THERE: unpacks .gpu/artifacts.tar.xz (prepare.sh packs the artifacts:
# a run carries at most 64 MiB) into .gpu/artifacts once, with Python's
# tarfile (the machine may have no xz). Files go through a scratch folder and
# are renamed in one at a time without replacing any already there (such as
# speculative-pair.sh's artifacts placed by hand); .unpacked marks it done.
set -euo pipefail
stage=$(cd "$(dirname "$0")/../.." && pwd)/.gpu
[ -f "$stage/artifacts.tar.xz" ] || exit 0
[ -f "$stage/artifacts/.unpacked" ] && exit 0
scratch=$(mktemp -d "$stage/.unpack.XXXXXX")
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$stage/artifacts.tar.xz" "$scratch"
mkdir -p "$stage/artifacts"
for f in "$scratch"/artifacts/*; do [ -e "$stage/artifacts/${f##*/}" ] || mv "$f" "$stage/artifacts/"; done
touch "$stage/artifacts/.unpacked"
rm -rf "$scratch"
