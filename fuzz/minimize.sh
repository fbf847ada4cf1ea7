#!/usr/bin/env bash
# Rebuilds fuzz/corpus/<target>/ from itself plus extra corpus directories (e.g. the scratch
# corpus of a long `run.sh`/`cargo fuzz run`), keeping it small enough to check in:
#   1. libFuzzer set-cover merge (like `cargo fuzz cmin`): a small set with all the coverage;
#   2. if more than MAX_FILES (30) or MAX_BYTES (200 KB) remain, a greedy set cover of the
#      inputs' coverage features picks at most that many;
#   3. `regress-*` reproducers of fixed bugs are always kept.
#
#   fuzz/minimize.sh TARGET [EXTRA_DIR...]
# Env: FUZZ_TARGET_DIR (default fuzz/target). Builds with cargo fuzz first.
set -euo pipefail
cd "$(dirname "$0")"
t="$1"
shift
max_files="${MAX_FILES:-30}"
# The regress-* files count against the cap.
max_files=$((max_files - $(find "corpus/$t" -name 'regress-*' | wc -l)))
max_bytes="${MAX_BYTES:-200000}"
target_dir="${FUZZ_TARGET_DIR:-$PWD/target}"
export RUSTC_BOOTSTRAP=1
cargo fuzz build --target-dir "$target_dir" "$t" >/dev/null
bin="$target_dir/x86_64-unknown-linux-gnu/release/$t"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/all" "$tmp/min"
for f in "corpus/$t"/*; do
  case "$(basename "$f")" in regress-*) ;; *) cp "$f" "$tmp/all/" ;; esac
done
for d in "$@"; do cp "$d"/* "$tmp/all/" 2>/dev/null || true; done
# With -set_cover_merge the control file lists every feature of each input ("FT <i> <f>...").
"$bin" -set_cover_merge=1 -merge_control_file="$tmp/control" -timeout=10 -rss_limit_mb=4096 \
  "$tmp/min" "$tmp/all" >"$tmp/merge.log" 2>&1
n=$(ls "$tmp/min" | wc -l)
size=$(du -sb "$tmp/min" | cut -f1)
if [ "$n" -gt "$max_files" ] || [ "$size" -gt "$max_bytes" ]; then
  # Greedy set cover over the features of every input: take the input adding the most
  # features not yet covered (the smaller on a tie), until MAX_FILES or no input adds any.
  rm -rf "$tmp/min"
  mkdir "$tmp/min"
  python3 - "$tmp/control" "$max_files" "$max_bytes" "$tmp/min" <<'PY'
import os, shutil, sys
control, max_files, max_bytes, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
lines = open(control).read().split("\n")
n = int(lines[0])
paths = lines[2 : 2 + n]
feats = {}
for line in lines[2 + n :]:
    parts = line.split()
    if parts and parts[0] == "FT":
        feats[int(parts[1])] = set(parts[2:])
covered, files, total = set(), 0, 0
while files < max_files:
    best, gain = None, 0
    for i, f in feats.items():
        size = os.path.getsize(paths[i])
        g = len(f - covered)
        if g and total + size <= max_bytes and (g > gain or (g == gain and size < os.path.getsize(paths[best]))):
            best, gain = i, g
    if best is None:
        break
    covered |= feats.pop(best)
    total += os.path.getsize(paths[best])
    files += 1
    shutil.copy(paths[best], os.path.join(out, os.path.basename(paths[best])))
print(f"greedy cover: {files} inputs, {total} bytes, {len(covered)} features")
PY
fi
# Reproducers of fixed bugs are always kept, whether or not they add coverage.
for f in "corpus/$t"/regress-*; do
  if [ -e "$f" ]; then cp "$f" "$tmp/min/"; fi
done
rm -rf "corpus/$t"
mkdir -p "corpus/$t"
cp "$tmp/min"/* "corpus/$t/"
echo "$t: $(ls "corpus/$t" | wc -l) files, $(du -sb "corpus/$t" | cut -f1) bytes"
"$bin" -runs=0 -rss_limit_mb=4096 "corpus/$t" 2>&1 | grep -m1 INITED || true
