#!/usr/bin/env bash
# The suite under load, as on a busy CI machine: run pytest RUNS times in a row while two busy
# loops take CPU time beside it, then stop them. Every run's log is kept; the summary says how
# many runs passed and which tests failed in the others.
#
#   tests/under_load.sh [RUNS] [pytest arguments...]       (default: 5 runs of the whole suite)
#   tests/under_load.sh 3 tests/test_report_loopside.py tests/test_hygiene.py
#
# PYTHON (default .venv/bin/python, else python3) runs pytest; LOGS (default a new temporary
# directory) keeps run-N.log. Exit status 0 only when every run passed. See docs/reliability.md.
set -u
cd "$(dirname "$0")/.."
runs=${1:-5}
[ $# -gt 0 ] && shift
py=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
logs=${LOGS:-$(mktemp -d -t under_load.XXXXXX)}
mkdir -p "$logs"

busy() { while :; do :; done; }
busy &
loop1=$!
busy &
loop2=$!
trap 'kill "$loop1" "$loop2" 2>/dev/null; wait "$loop1" "$loop2" 2>/dev/null' EXIT

passed=0
for i in $(seq 1 "$runs"); do
    log="$logs/run-$i.log"
    start=$(date +%s)
    "$py" -m pytest -q -p no:cacheprovider "$@" >"$log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        echo "run $i/$runs: passed in ${took} s ($(tail -n 1 "$log"))"
    else
        echo "run $i/$runs: FAILED (exit $rc) in ${took} s; $log"
        grep -E '^(FAILED|ERROR) ' "$log" | sed 's/^/    /'
    fi
done
echo "under load (2 busy loops, load average now $(cut -d' ' -f1-3 /proc/loadavg)):" \
    "$passed of $runs runs passed; logs in $logs"
[ "$passed" -eq "$runs" ]
