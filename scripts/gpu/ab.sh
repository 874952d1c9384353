#!/usr/bin/env bash
# Runs THERE (the GPU machine, repo root, .gpu carried): an A/B of kiln bench
# under two or more environment settings of one build, alternating them
# round by round (so drift on the machine falls on every setting alike),
# one line per round and setting with the figures kiln bench printed.
#
#   bash scripts/gpu/ab.sh [-r ROUNDS] [-t TYPE] [-m ARTIFACT] [-w WEIGHTS] SETTING... -- BENCH_ARGS...
#
# SETTING: space-separated VAR=VALUE pairs, or - for none, e.g.
#   bash scripts/gpu/ab.sh - KILN_CUDA_TILE_INT8_WIDE=0 -- --backend cuda --batch 16 --prompt 64 --gen 32 --repeats 2
# A setting whose first word is @DIR runs another build: DIR/kiln with the
# artifact of the same name from DIR/artifacts.tar.xz (a copy of an earlier
# .gpu/bin/kiln and .gpu/artifacts.tar.xz, carried beside .gpu), e.g.
#   bash scripts/gpu/ab.sh - @.gold -- --backend cuda --prompt 512 --gen 64
# Defaults: 2 rounds, type q4_k, .gpu/artifacts/llama3-8b-TYPE.prog.kiln
# with the weights kiln synth makes for it (synthesised into /tmp/w once).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=$root/.gpu
rounds=2 type=q4_k artifact= weights=
while getopts "r:t:m:w:" o; do
  case $o in
    r) rounds=$OPTARG ;;
    t) type=$OPTARG ;;
    m) artifact=$OPTARG ;;
    w) weights=$OPTARG ;;
    *) sed -n '2,16p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
settings=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do settings+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
if [ ${#settings[@]} -lt 1 ] || [ $# -lt 1 ]; then sed -n '2,16p' "$0" >&2; exit 2; fi
bash "$root/scripts/gpu/unpack.sh"
export LD_LIBRARY_PATH=$stage/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
kiln=$stage/bin/kiln
artifact=${artifact:-$stage/artifacts/llama3-8b-$type.prog.kiln}
if [ -z "$weights" ] && [ "${artifact%.prog.kiln}" != "$artifact" ]; then
  weights=/tmp/w/llama3-8b-$type.gguf
  mkdir -p /tmp/w
  [ -f "$weights" ] || "$kiln" synth --preset llama3-8b --type "$type" -o "$weights" >/dev/null || exit 1
fi
# The artifact named like ours in DIR/artifacts.tar.xz, unpacked once.
other_artifact() {
  local dir=$1 to
  [ -x "$dir/kiln" ] && [ -f "$dir/artifacts.tar.xz" ] || return 1
  to=/tmp/ab-$(cd "$dir" && pwd | tr / _)
  if [ ! -d "$to/artifacts" ]; then
    mkdir -p "$to" && python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$dir/artifacts.tar.xz" "$to" || return 1
  fi
  [ -f "$to/artifacts/${artifact##*/}" ] && echo "$to/artifacts/${artifact##*/}"
}
status=0
for ((r = 1; r <= rounds; r++)); do
  for s in "${settings[@]}"; do
    env_args=()
    [ "$s" != "-" ] && read -r -a env_args <<<"$s"
    run_kiln=$kiln run_artifact=$artifact
    first=${env_args[0]:-}
    if [ "${first#@}" != "$first" ]; then
      other=${first#@}
      env_args=("${env_args[@]:1}")
      run_kiln=$other/kiln
      run_artifact=$(other_artifact "$other") || { status=1; echo "round $r [$s]: no $other/kiln, or no ${artifact##*/} in $other/artifacts.tar.xz"; continue; }
    fi
    out=$(env "${env_args[@]}" "$run_kiln" bench "$run_artifact" ${weights:+--weights "$weights"} "$@" 2>&1)
    rc=$?
    [ $rc -eq 0 ] || status=1
    figures=$(grep -E '^(prefill|decode) ' <<<"$out" | sed -E 's/ +/ /g; s/ limit .*//' | paste -sd ';' -)
    [ $rc -eq 0 ] || figures="rc $rc: $(grep -v '^(see' <<<"$out" | tail -1)"
    echo "round $r [$s]: $figures"
  done
done
exit $status
