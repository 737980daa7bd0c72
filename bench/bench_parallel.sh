#!/usr/bin/env bash
# Many GPUs (docs/distributed.md): one rank of a data-parallel job and the fit table, on Llama-shaped programs
# exported on meta at sequence 4096 (bench/make_meta_llama.py: 7B, and Llama-2-70B's shape). Prints wall time and
# peak resident set (/usr/bin/time -v) of each command against its target:
#   - analyze of a 7B AdamW step as one rank of FSDP on 8 GPUs, bfloat16 parameters (target 5 s, 1 GiB);
#   - fit of the 7B for an H100-80GB, every precision and strategy, 1..1024 GPUs (target 10 s);
#   - fit of the 70B (target 30 s);
#   - the same fits with the checkpoint axis, --checkpoint none,selective,full (7B: 10 s; 70B: 30 s and 2 GiB);
#   - fit of the GPT demo for 8 GiB on 1, 2 and 8 GPUs (target 10 s).
# The programs are kept in the work folder (default: a temp folder) for the next run.
#   bench/bench_parallel.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../build}"
work="${2:-${TMPDIR:-/tmp}/memledger-bench-parallel}"
python="${MEMLEDGER_PYTHON:-$here/../.venv-torch/bin/python}"
memledger="$build/app/memledger"
mkdir -p "$work"

make() { # OUT SIZE
  if [ ! -f "$work/$1" ]; then
    "$python" "$here/make_meta_llama.py" "$work/$1" "$2" --seq 4096
  fi
}
make llama7b-4096.pt2 7b
make llama70b-4096.pt2 70b

missed=0
run() { # NAME TARGET_S TARGET_MIB ARGS...
  local name=$1 target=$2 mib=$3
  shift 3
  /usr/bin/time -v "$memledger" "$@" >"$work/$name.out" 2>"$work/$name.time" || { tail -n 20 "$work/$name.time" >&2; exit 1; }
  local e secs rss
  e=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/$name.time")
  secs=$(echo "$e" | awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }')
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/$name.time")
  local verdict=ok
  if awk -v s="$secs" -v t="$target" -v r="$rss" -v m="$mib" 'BEGIN { exit !(s > t || (m > 0 && r / 1024 > m)) }'; then
    verdict="MISSED A TARGET"
    missed=1
  fi
  printf '%-36s %7.2f s (target %s s)  %6.0f MiB%s  %s\n' "$name" "$secs" "$target" "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" \
    "$([ "$mib" -gt 0 ] && echo " (target $mib MiB)")" "$verdict"
}
run "7B rank, fsdp on 8 GPUs" 5 1024 analyze "$work/llama7b-4096.pt2" --input 1x4096:int64 --mode train \
  --optimizer adamw --gpus 8 --shard fsdp --param-dtype bfloat16
run "7B fit, H100-80GB" 10 0 fit "$work/llama7b-4096.pt2" --input 1x4096:int64 --budget H100-80GB
run "70B fit, H100-80GB" 30 0 fit "$work/llama70b-4096.pt2" --input 1x4096:int64 --budget H100-80GB
run "7B fit, checkpoint axis" 10 0 fit "$work/llama7b-4096.pt2" --input 1x4096:int64 --budget H100-80GB \
  --checkpoint none,selective,full
run "70B fit, checkpoint axis" 30 2048 fit "$work/llama70b-4096.pt2" --input 1x4096:int64 --budget H100-80GB \
  --checkpoint none,selective,full
run "GPT demo fit, 8 GiB, 1,2,8 GPUs" 10 0 fit demo:gpt.pt2 --budget 8GiB --gpus 1,2,8
grep -E "^bfloat16-mixed +fsdp" "$work/7B fit, H100-80GB.out" | sed 's/^/  7B:  /' || true
grep -E "^bfloat16-mixed +fsdp" "$work/70B fit, H100-80GB.out" | sed 's/^/  70B: /' || true
grep -E "^bfloat16-mixed +fsdp" "$work/70B fit, checkpoint axis.out" | sed 's/^/  70B: /' || true
exit $missed
