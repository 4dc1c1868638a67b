#!/usr/bin/env bash
# Instructions per get (present and missing key), multi_get key, put and compaction, counted by
# callgrind for two commits of the engine, and the ratio of each count after/before.
#
#   benches/callgrind.sh [--runs N] [--only WORKLOAD] BEFORE [AFTER]   (AFTER defaults to HEAD)
#
# Each commit is checked out into a worktree of its own and built (release, the `bloomkv`
# tool) into a target directory of its own, under $CALLGRIND_WORK (default
# ${TMPDIR:-/tmp}/bloomkv-callgrind/<commit>/{src,target}); both are kept and reused. The
# harness is the tool's `bloomkv bench`, which both commits must have with these workloads; the
# builds run one after the other, then every measurement, one at a time.
#
# Each workload is one `bloomkv bench` run under `valgrind --tool=callgrind
# --toggle-collect=FN`: only instructions executed on a thread while inside FN are counted,
# so loading the database, background flushes and compactions, and the bench's own timing
# are not. FN is
#   get (present, missing)  Db::get or Readable::get      readrandom / readmissing
#   multi_get               run_reads::{{closure}}        multireadrandom, 32 keys per call
#   put                     run_writers::{{closure}}      writers: one thread, unsynced puts
#                                                         of new keys into a fresh database
#   compaction              bloomkv::db::Db::compact      compact: one Db::compact() of
#                                                         four overlapping ingested runs
# A get is counted in `Db::get` for commits that have it and in the `Readable` trait's provided
# method for commits that read through it: the workload names both, and a binary has only one.
# A multi_get is counted through the bench's closure around the call (which adds the choice of
# its 32 keys and the check of each answer, the same code for both commits), because the
# trait's `multi_get` is small enough that rustc inlines it there.
# The put is counted through the bench's per-put closure, not `Db::put`, because `Db::put` is
# generic and rustc inlines it into that closure in some builds (then callgrind never sees it
# entered); the closure adds only the bench's key and value choice, the same code for both
# commits. The compaction's dataset is small enough to be merged in one part, on the calling
# thread (subcompactions on threads of their own would not be counted).
#
# Counts repeat to within about 0.05% (hash maps are seeded per process); with --runs N each
# workload runs N times and the median is reported, with the spread (max - min) / median.
# Raw callgrind files stay in $CALLGRIND_WORK/out/ for callgrind_annotate.
set -euo pipefail

runs=1
only=
while [[ ${1:-} == --runs || ${1:-} == --only ]]; do
  case $1 in
    --runs) runs=$2 ;;
    --only) only=$2 ;;
  esac
  shift 2
done
if [[ $# -lt 1 || $# -gt 2 ]]; then
  sed -n '2,6p' "$0" >&2
  exit 2
fi
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }

repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=${CALLGRIND_WORK:-${TMPDIR:-/tmp}/bloomkv-callgrind}
mkdir -p "$work/out"

# Key counts: the reads as in the measurements before (100,000 keys, 200,000 lookups); the puts
# the bench's default count, each of a new key; the compaction 100,000 entries (about 12 MB,
# under one table's target, so one part).
keys=100000
reads=200000
writes=400000
common=(--load ingest --policies blocked --sweep none --quiet)

# name | bench arguments | functions collected (space-separated) | operations the count is divided by
workloads=(
  "get-present|--keys $keys --workloads readrandom --reads $reads|bloomkv::db::Db::get bloomkv::db::readable::Readable::get|$reads"
  "get-missing|--keys $keys --workloads readmissing --reads $reads|bloomkv::db::Db::get bloomkv::db::readable::Readable::get|$reads"
  "multi_get|--keys $keys --workloads multireadrandom --reads $reads|bloomkv::bench::workloads::run_reads::{{closure}}|$reads"
  "put|--keys $writes --workloads writers --writes $writes --threads 1|bloomkv::bench::workloads::run_writers::{{closure}}|$writes"
  "compaction|--keys $keys --workloads compact|bloomkv::db::Db::compact|$keys"
)

build() { # rev -> prints the binary's path
  local sha
  sha=$(git -C "$repo" rev-parse --verify "$1^{commit}")
  local dir="$work/$sha"
  if [[ ! -e $dir/src ]]; then
    mkdir -p "$dir"
    git -C "$repo" worktree add --detach "$dir/src" "$sha" >&2
  fi
  (cd "$dir/src" && CARGO_TARGET_DIR="$dir/target" cargo build --release -q -p bloomkv-tools >&2)
  echo "$dir/target/release/bloomkv"
}

measure() { # binary, label, name, bench args, function -> prints the median count
  local bin=$1 label=$2 name=$3 args=$4 fn=$5 counts=() toggles=() f
  for f in $fn; do toggles+=(--toggle-collect="$f"); done
  for ((i = 1; i <= runs; i++)); do
    local out="$work/out/$label-$name-$i.out" db
    db=$(mktemp -d "$work/db.XXXXXX")
    # shellcheck disable=SC2086 # the bench arguments are words
    valgrind --tool=callgrind "${toggles[@]}" --callgrind-out-file="$out" \
      "$bin" bench $args "${common[@]}" --dir "$db/d" >/dev/null 2>"$out.log"
    rm -rf "$db"
    counts+=("$(awk '/^(summary|totals):/ {print $2; exit}' "$out")")
  done
  printf '%s\n' "${counts[@]}" | sort -n | awk '{c[NR] = $1} END {
    m = c[int((NR + 1) / 2)]
    printf "%.0f %.3f\n", m, (NR > 1 ? 100 * (c[NR] - c[1]) / m : 0) }'
}

before=$1
after=${2:-HEAD}
bin_before=$(build "$before")
bin_after=$(build "$after")
label_before=$(git -C "$repo" rev-parse --short "$before")
label_after=$(git -C "$repo" rev-parse --short "$after")

printf '%-12s %15s %15s %11s %11s %9s %8s\n' workload "$label_before" "$label_after" \
  "per op (b)" "per op (a)" change spread%
for w in "${workloads[@]}"; do
  IFS='|' read -r name args fn ops <<<"$w"
  [[ -z $only || $only == "$name" ]] || continue
  read -r b sb < <(measure "$bin_before" "$label_before" "$name" "$args" "$fn")
  read -r a sa < <(measure "$bin_after" "$label_after" "$name" "$args" "$fn")
  awk -v n="$name" -v b="$b" -v a="$a" -v ops="$ops" -v sb="$sb" -v sa="$sa" 'BEGIN {
    printf "%-12s %15.0f %15.0f %11.1f %11.1f %+8.2f%% %4.2f/%.2f\n",
      n, b, a, b / ops, a / ops, 100 * (a - b) / b, sb, sa }'
done
