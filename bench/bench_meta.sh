#!/usr/bin/env bash
# Models bigger than the machine: a 7B Llama-shaped decoder exported on the meta device (weights as shapes only,
# bench/make_meta_llama.py), recorded by memledger on meta (its default for such a file), inference and an AdamW
# step at 1x512; then, side by side, the same architecture at a small size with real weights on the CPU and
# exported on meta. Prints wall time and peak resident set (/usr/bin/time -v) of each run and meta's ratio to
# the CPU's. The programs are kept in the work folder (default: a temp folder) for the next run.
#   bench/bench_meta.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../build}"
work="${2:-${TMPDIR:-/tmp}/memledger-bench-meta}"
python="${MEMLEDGER_PYTHON:-$here/../.venv-torch/bin/python}"
memledger="$build/app/memledger"
mkdir -p "$work"

make() { # OUT SIZE [--real]
  if [ ! -f "$work/$1" ] && ! /usr/bin/time -v "$python" "$here/make_meta_llama.py" "$work/$1" "${@:2}" 2>"$work/$1.time"; then
    tail -n 40 "$work/$1.time" >&2
    exit 1
  fi
  [ -f "$work/$1.time" ] && grep -E "Elapsed|Maximum resident" "$work/$1.time" | sed "s/^\s*/  export $1: /" || true
}
make llama7b.pt2 7b
make small_meta.pt2 small
make small_real.pt2 small --real

declare -A secs rss
run() { # NAME FILE ARGS...
  local name=$1 file=$2
  shift 2
  /usr/bin/time -v "$memledger" analyze "$work/$file" --input 1x512:int64 --json "$work/$name.json" "$@" \
    >"$work/$name.out" 2>"$work/$name.time"
  local e
  e=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/$name.time")
  secs[$name]=$(echo "$e" | awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }')
  rss[$name]=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/$name.time")
  printf '%-24s %8.2f s  %8.0f MiB  peak total %s\n' "$name" "${secs[$name]}" "$(awk -v k="${rss[$name]}" 'BEGIN { print k / 1024 }')" \
    "$("$python" -c 'import json, sys; r = json.load(open(sys.argv[1])); g = r.get("simulated_gpu", {}); print("%.2f GiB, simulated GPU reserve %.2f GiB" % (r["peak_total_bytes"] / 2**30, g.get("reserved_peak_bytes", 0) / 2**30))' "$work/$name.json" 2>/dev/null || echo ?)"
  figures[$name]=$("$python" -c 'import json, sys; r = json.load(open(sys.argv[1])); g = r.get("simulated_gpu", {}); print("%.2f GiB | %.2f GiB" % (r["peak_total_bytes"] / 2**30, g.get("reserved_peak_bytes", 0) / 2**30))' "$work/$name.json" 2>/dev/null || echo "? | ?")
}
declare -A figures
train=(--mode train --optimizer adamw)
run 7b_inference llama7b.pt2
run 7b_adamw llama7b.pt2 "${train[@]}"
run small_cpu_inference small_real.pt2 --device cpu
run small_meta_inference small_meta.pt2
run small_cpu_adamw small_real.pt2 --device cpu "${train[@]}"
run small_meta_adamw small_meta.pt2 "${train[@]}"
for m in inference adamw; do
  printf 'small %-9s meta/cpu: time %.2f, RSS %.2f\n' "$m" \
    "$(awk -v a="${secs[small_meta_$m]}" -v b="${secs[small_cpu_$m]}" 'BEGIN { print a / b }')" \
    "$(awk -v a="${rss[small_meta_$m]}" -v b="${rss[small_cpu_$m]}" 'BEGIN { print a / b }')"
done

# The same as a markdown table (docs/meta.md, "Speed: a 7B model on this machine", is this output pasted, with
# its date), then the 7B what-if the doc reads.
mib() { awk -v k="$1" 'BEGIN { printf "%.0f MiB", k / 1024 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
echo
echo "| run (1x512) | time | max RSS | peak total | simulated GPU reserve |"
echo "| --- | ---: | ---: | ---: | ---: |"
if [ -f "$work/llama7b.pt2.time" ]; then
  e=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/llama7b.pt2.time" | awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }')
  r=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/llama7b.pt2.time")
  printf '| export the 7B on meta (Python, `torch.export.save`, %s bytes) | %.1f s | %s | | |\n' \
    "$(stat -c %s "$work/llama7b.pt2")" "$e" "$(mib "$r")"
fi
row() { # NAME LABEL [CPU NAME to compare with]
  local extra_t="" extra_r=""
  if [ -n "${3:-}" ]; then
    extra_t=" ($(ratio "${secs[$1]}" "${secs[$3]}"))"
    extra_r=" ($(ratio "${rss[$1]}" "${rss[$3]}"))"
  fi
  printf '| %s | %.2f s%s | %s%s | %s |\n' "$2" "${secs[$1]}" "$extra_t" "$(mib "${rss[$1]}")" "$extra_r" "${figures[$1]}"
}
row 7b_inference "7B inference on meta"
row 7b_adamw "7B AdamW step on meta"
row small_cpu_inference "small inference, CPU (real weights)"
row small_meta_inference "small inference, meta" small_cpu_inference
row small_cpu_adamw "small AdamW step, CPU (real weights)"
row small_meta_adamw "small AdamW step, meta" small_cpu_adamw
echo
echo "\$ memledger whatif llama7b.pt2 --input 1x512:int64 --mode train --optimizer adamw --batch 1,2,4,8 --dtype float32,bfloat16 --budget 80GiB"
"$memledger" whatif "$work/llama7b.pt2" --input 1x512:int64 --mode train --optimizer adamw --batch 1,2,4,8 \
  --dtype float32,bfloat16 --budget 80GiB 2>/dev/null
