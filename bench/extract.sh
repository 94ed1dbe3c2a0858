#!/usr/bin/env bash
# Extraction throughput and peak memory: `factomat extract` (release) and Mozilla Readability
# (@mozilla/readability 0.6.0 + jsdom 27, pinned in bench/readability/package-lock.json) on the
# development corpus, in one run, side by side. Not part of scripts/test.
#
#   bench/extract.sh [CORPUS_DIR] [ROUNDS]
#
# factomat: one process extracts every page (files read, extracted, VM01 JSON printed to
# /dev/null); the median wall time of ROUNDS runs counts, so process start-up is included.
# Readability: pages are read into memory first and only the parse loop is timed (median of
# ROUNDS passes in one process), which favours Readability.
# Peak memory: maximum resident set size of each process (GNU time).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
corpus="${1:-${FACTOMAT_CORPUS:-/work/shared/corpus/mozilla-readability}}"
rounds="${2:-3}"
[[ -d "$corpus/test-pages" ]] || { echo "corpus not found: $corpus" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "GNU time (/usr/bin/time) is required" >&2; exit 2; }

cd "$root"
cargo build --locked --release --quiet --bin factomat
factomat="${CARGO_TARGET_DIR:-$root/target}/release/factomat"
if [[ ! -d bench/readability/node_modules ]]; then
  (cd bench/readability && npm ci --no-audit --no-fund --silent)
fi

mapfile -t pages < <(ls -d "$corpus"/test-pages/*/source.html | sort)
bytes=$(cat "${pages[@]}" | wc -c)
count=${#pages[@]}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for ((i = 0; i < rounds; i++)); do
  /usr/bin/time -f "%e %M" -o "$tmp/factomat.$i" "$factomat" extract --max-text-chars 0 \
    --url http://fakehost/test/ --content-type "text/html; charset=utf-8" "${pages[@]}" >/dev/null
done
/usr/bin/time -f "%e %M" -o "$tmp/readability" node bench/readability/run.mjs "$corpus" "$rounds" >"$tmp/readability.json"

python3 - "$tmp" "$rounds" "$count" "$bytes" <<'PY'
import json, statistics, sys
tmp, rounds, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = [open(f"{tmp}/factomat.{i}").read().split() for i in range(rounds)]
f_seconds = statistics.median(float(r[0]) for r in runs)
f_rss = max(int(r[1]) for r in runs) / 1024
r = json.load(open(f"{tmp}/readability.json"))
r_rss = int(open(f"{tmp}/readability").read().split()[1]) / 1024
f_pps, r_pps = count / f_seconds, r["pages_per_second"]
print(f"corpus: {count} pages, {size / 1e6:.1f} MB; median of {rounds}")
print(f"{'extractor':<40} {'pages/s':>9} {'MB/s':>8} {'peak RSS':>10}")
print(f"{'factomat extract (release, whole process)':<40} {f_pps:>9.1f} {size / 1e6 / f_seconds:>8.2f} {f_rss:>8.0f} MB")
print(f"{'Readability 0.6.0 + jsdom 27 (parse loop)':<40} {r_pps:>9.1f} {r['mb_per_second']:>8.2f} {r_rss:>8.0f} MB")
if r.get("failures"):
    print(f"  Readability/jsdom threw on {r['failures']} page(s) (counted as attempted)")
print(f"factomat / Readability pages/s: {f_pps / r_pps:.1f}x (aim: >= 10x)")
PY
