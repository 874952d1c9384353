#!/usr/bin/env bash
# Moves a file larger than one device call may carry (64 MiB) to the GPU
# machine in pieces, for the real-model runs (issue 8's Qwen2.5-Coder pair:
# 1.5 GB). The machine keeps what a call leaves outside the repository copy
# while it stays warm, so consecutive calls, each carrying one piece, build
# the file up in $KILN_SHIP_DIR there; the last call joins and checks it.
#
#   here:  bash scripts/gpu/ship.sh split FILE [MIB]   # .ship/NAME.000, .001, ... (default 56 MiB: the repository copy travels too) + NAME.sha256
#   there: bash scripts/gpu/ship.sh take               # each call, carry [".ship/NAME.NNN", ".ship/NAME.sha256"]
#   there: bash scripts/gpu/ship.sh join NAME DEST     # concatenates the pieces in order, checks the sha256
#   there: bash scripts/gpu/ship.sh have NAME          # which pieces are there (after a machine restart: none)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=$root/.ship
there=${KILN_SHIP_DIR:-/tmp/kiln-ship}

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
case $1 in
  split)
    [ $# -ge 2 ] || usage
    file=$2 mib=${3:-56}
    [ -f "$file" ] || { echo "ship: no such file: $file" >&2; exit 1; }
    [ "$mib" -ge 1 ] && [ "$mib" -le 63 ] || { echo "ship: pieces must be 1-63 MiB (a call carries 64 MiB)" >&2; exit 1; }
    name=$(basename "$file")
    mkdir -p "$stage"
    rm -f "$stage/$name".[0-9][0-9][0-9] "$stage/$name.sha256"
    split -b "${mib}M" -d -a 3 "$file" "$stage/$name."
    (cd "$(dirname "$file")" && sha256sum "$name") >"$stage/$name.sha256"
    n=$(ls "$stage/$name".[0-9][0-9][0-9] | wc -l)
    echo "ship: $name in $n pieces of at most $mib MiB under .ship/; one call per piece, each with"
    echo "  carry [\".ship/$name.NNN\", \".ship/$name.sha256\"] and command: bash scripts/gpu/ship.sh take"
    ;;
  take)
    mkdir -p "$there"
    shopt -s nullglob
    moved=0
    for f in "$stage"/*; do
      cp "$f" "$there/" && moved=$((moved + 1))
    done
    echo "ship: $moved file(s) now in $there: $(ls "$there" | tr '\n' ' ')"
    ;;
  have)
    [ $# -ge 2 ] || usage
    ls "$there/$2".[0-9][0-9][0-9] 2>/dev/null | sed 's/.*\.//' | tr '\n' ' '
    echo
    ;;
  join)
    [ $# -ge 3 ] || usage
    name=$2 dest=$3
    [ -f "$there/$name.sha256" ] || { echo "ship: $there/$name.sha256 missing (run take first)" >&2; exit 1; }
    pieces=("$there/$name".[0-9][0-9][0-9])
    [ -f "${pieces[0]}" ] || { echo "ship: no pieces of $name in $there" >&2; exit 1; }
    # Pieces are numbered from 000 without gaps; a missing one is named.
    for i in "${!pieces[@]}"; do
      want=$(printf '%s/%s.%03d' "$there" "$name" "$i")
      [ "${pieces[$i]}" = "$want" ] || { echo "ship: piece $(printf %03d "$i") of $name is missing" >&2; exit 1; }
    done
    mkdir -p "$(dirname "$dest")"
    cat "${pieces[@]}" >"$dest"
    want=$(cut -d' ' -f1 "$there/$name.sha256")
    got=$(sha256sum "$dest" | cut -d' ' -f1)
    if [ "$want" != "$got" ]; then
      echo "ship: $name joined from ${#pieces[@]} pieces does not match its sha256 (pieces missing at the end?)" >&2
      rm -f "$dest"
      exit 1
    fi
    echo "ship: $dest ($(stat -c %s "$dest") bytes, ${#pieces[@]} pieces, sha256 ok)"
    ;;
  *) usage ;;
esac
