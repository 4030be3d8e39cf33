#!/bin/bash
# Device check for issue 34: runs the propagation bench on all cores and on two.
# usage: .dev/run.sh, each .dev/BIN.xz a stripped flotilla, with lines of
# "TAG TIMEOUT BIN [hub=WRAPPER] [taskset CPUS] bench-args..." on stdin;
# WRAPPER's commas are spaces (hub=env,TOKIO_WORKER_THREADS=8); bench-args
# that start with "store" run `flotilla bench store` instead (the store's
# writer alone: "w-store 300 n store --writes 200000")
set -u
D=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; mkdir -p $R
for x in "$D"/*.xz; do b=$(basename "$x" .xz); mkdir -p /tmp/bin-$b; xz -d -T0 -c "$x" > /tmp/bin-$b/flotilla && chmod +x /tmp/bin-$b/flotilla; done
nproc; date -u; (lscpu; free -g; uname -a) > $R/machine.txt 2>&1; head -15 $R/machine.txt
ulimit -n 1048576 2>/dev/null || ulimit -n 65536
pack() { tar -C /tmp -czf $OUT/res.tar.gz res; }
while read -r tag to bin rest; do
  [ -z "$tag" ] && continue
  pre=""; hubw=""
  case "$rest" in hub=*) hubw=$(echo $rest | cut -d' ' -f1 | cut -d= -f2- | tr , ' '); rest=$(echo $rest | cut -d' ' -f2-);; esac
  case "$rest" in taskset*) pre="taskset -c $(echo $rest | cut -d' ' -f2)"; rest=$(echo $rest | cut -d' ' -f3-);; esac
  bench=propagation
  case "$rest" in store*) bench=store; rest=${rest#store};; esac
  python3 $D/threads.py $R/$tag.threads "flotilla controlplane" "flotilla member" "flotilla bench" &
  sp=$!
  t0=$(date +%s.%N)
  FLOTILLA_BENCH_HUB_WRAPPER="$hubw" timeout $to $pre /tmp/bin-$bin/flotilla bench $bench --json $rest > $R/$tag.json 2> $R/$tag.err
  rc=$?
  kill -TERM $sp; wait $sp 2>/dev/null
  python3 - $R/$tag.json "$tag" "$rc" <<'PY'
import json,sys
try:
    d=json.load(open(sys.argv[1]))
    if d.get('bench') == 'store':
        for m in ('pipelined', 'writer_syncs'):
            f = d[m]
            print(sys.argv[2], m, '%.0f writes/s, %.1f a commit, %.1f a sync, writer busy %.0f%% (%.1f us CPU a write), publisher busy %.0f%%, p99 %.1f ms' % (f['writes_per_second'], f['writes_per_commit'], f['writes_per_sync'], f['writer_busy_percent'], f['writer_cpu_us_per_write'], f['publisher_busy_percent'], f['latency_ms']['p99']), flush=True)
        sys.exit(0)
    c=d.get('cpu_seconds') or {}; dc=c.get('distribution',{}); dd=c.get('direct',{})
    print(sys.argv[2], 'rc', sys.argv[3], 'create %.1f' % d['create_seconds'], 'dist %.1f direct %.2f ratio %.2f p50 %.0f p99 %.0f rss %.1f' % (d['distribution_seconds'], d['direct_seconds'] or 0, d['flotilla_over_direct'] or 0, d['latency_ms']['p50'], d['latency_ms']['p99'], d['controlplane_peak_rss_mib']), 'cpu hub', dc.get('controlplane'), 'mem', dc.get('members'), 'cli', dc.get('client'), flush=True)
except Exception as e:
    print(sys.argv[2], 'rc', sys.argv[3], 'no json', e, flush=True)
try:
    for q, v in sorted(d.get('queues', {}).items()):
        print('   %-28s adds %7d wait %8.1f ms work %7.1f ms peak %6d' % (q, v['adds'], v['mean_wait_ms'], v['mean_work_ms'], v['peak_depth']))
    for k, v in d['stages'].items(): print('   %-52s %7d %8.2f ms' % (k, v['count'], v['mean_ms']))
    w = d.get('store_writer')
    if w: print('   store writer: writes %d commits %d (%.1f each, %.0f/s) syncs %s busy %.0f%% sync %.0f%% publisher %s%%' % (w['writes'], w['commits'], w['writes_per_commit'], w['writes_per_second'], w.get('syncs'), w['busy_percent'], w['sync_percent'], w.get('publisher_busy_percent')))
except Exception as e:
    print('no queues', e)
PY
  head -6 $R/$tag.threads
  pkill -9 -f "flotilla controlplane"; pkill -9 -f "flotilla member"; sleep 1
  pack
done
pack
