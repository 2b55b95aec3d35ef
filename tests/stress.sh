#!/usr/bin/env bash
# The whole test suite in the four conditions it must pass in (issue 34), one after the other,
# each one's counts and wall time on one line at the end:
#   a  a quiet machine;
#   b  under load: one busy process per usable CPU for the whole suite;
#   c  from a background job of a non-interactive shell, which starts with SIGINT ignored
#      (as `nohup python -m pytest -q &` or a batch script does);
#   d  with an empty numba cache (the first run after an install).
#
# Usage: tests/stress.sh [--fresh] [CONDITION ...]      (default: a b c d)
#   --fresh  clone this checkout's HEAD into a temporary folder, make a virtual environment
#            there and install it exactly as README's Quickstart says; the conditions then run
#            on that clone. Without it they run here, with the current `python`.
# Extra arguments for pytest go in PYTEST_ARGS (e.g. PYTEST_ARGS='-m "not slow"').
# Exit status: 0 when every condition ran with no failure and no error, 1 otherwise.
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"
fresh=0
conds=()
for a in "$@"; do
  case "$a" in
    --fresh) fresh=1 ;;
    a|b|c|d) conds+=("$a") ;;
    *) echo "stress.sh: unknown argument '$a' (conditions are a b c d; option --fresh)" >&2; exit 2 ;;
  esac
done
[ ${#conds[@]} -gt 0 ] || conds=(a b c d)

work="$(mktemp -d "${TMPDIR:-/tmp}/hybridsched-stress.XXXXXX")"
logs="$(mktemp -d "${TMPDIR:-/tmp}/hybridsched-stress-logs.XXXXXX")"  # kept: read the failures
loaders=()
cleanup() {
  for p in "${loaders[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ $fresh -eq 1 ]; then
  git clone -q "$here" "$work/clone" || exit 1
  cd "$work/clone" || exit 1
  python3 -m venv "$work/venv" || exit 1
  # shellcheck disable=SC1091
  . "$work/venv/bin/activate"
  python -m pip install -q --upgrade pip >/dev/null
  # README's Quickstart, both lines' installs (running `hybridsched run` is not a test)
  pip install -q . >/dev/null && pip install -q '.[test]' >/dev/null || exit 1
else
  cd "$here" || exit 1
fi

summary=()
status=0
pytest_line="$(command -v python) -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-}"
run_suite() {  # $1 condition, $2 the command line that runs the suite
  local cond=$1 log="$logs/$1.log" t0 t1 line
  t0=$(date +%s)
  eval "$2" >"$log" 2>&1
  t1=$(date +%s)
  line=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error)' "$log" | tail -n 1 | sed 's/=//g; s/^ *//; s/ *$//')
  [ -n "$line" ] || line="no summary (see the log below)"
  summary+=("$cond: $line; wall $((t1 - t0)) s")
  if ! grep -qE '^(=+ )?[0-9]+ passed' "$log" || grep -qE '[0-9]+ (failed|error)' "$log"; then
    status=1
    echo "--- condition $cond: failures ---"
    grep -E '^(FAILED|ERROR) ' "$log" || tail -n 40 "$log"
  fi
}

for c in "${conds[@]}"; do
  case "$c" in
    a) run_suite a "$pytest_line" ;;
    b)
      n=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
      for _ in $(seq "$n"); do
        python3 -c 'while True: pass' & loaders+=($!)
      done
      run_suite b "$pytest_line"
      for p in "${loaders[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
      loaders=()
      ;;
    c)
      # A non-interactive shell starts a background job (a simple command with `&`) with
      # SIGINT and SIGQUIT ignored, as `nohup python -m pytest -q &` or a batch script does.
      # The job checks that it really started so before it runs the suite.
      cat >"$work/background.sh" <<EOF
grep -q '^SigIgn:.*[2367abef]\$' /proc/self/status ||
  { echo "condition c: SIGINT is not ignored in the background job"; exit 1; }
exec $pytest_line
EOF
      run_suite c "bash -c 'nohup sh $work/background.sh </dev/null & wait \$!'"
      ;;
    d)
      # numba's cache goes to a fresh, empty folder: every cached kernel compiles again
      run_suite d "NUMBA_CACHE_DIR=$work/numba-cache $pytest_line"
      ;;
  esac
done

echo "--- tests/stress.sh ($(git -C "$PWD" rev-parse --short HEAD 2>/dev/null), $(nproc) CPUs; logs in $logs) ---"
for s in "${summary[@]}"; do echo "$s"; done
exit $status
