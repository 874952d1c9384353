#!/usr/bin/env bash
# Runs THERE: unpacks .gpu/artifacts.tar.xz (prepare.sh packs the artifacts:
# a run carries at most 64 MiB) into .gpu/artifacts once, with Python's
# tarfile (the machine may have no xz), into a scratch folder first and then
# renamed, so that scripts started side by side never see half of it.
set -euo pipefail
stage=$(cd "$(dirname "$0")/../.." && pwd)/.gpu
[ -d "$stage/artifacts" ] || [ ! -f "$stage/artifacts.tar.xz" ] && exit 0
scratch=$(mktemp -d "$stage/.unpack.XXXXXX")
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$stage/artifacts.tar.xz" "$scratch"
mv -T "$scratch/artifacts" "$stage/artifacts" 2>/dev/null || true  # another script got there first
rm -rf "$scratch"
