#!/usr/bin/env python3
# Samples per-thread CPU (utime+stime ticks) of processes whose cmdline matches a pattern,
# every second until killed; prints totals per (process, thread name) at SIGTERM.
import os, sys, time, signal, json
pats = sys.argv[2:]; outf = sys.argv[1]
hz = os.sysconf('SC_CLK_TCK')
first = {}; last = {}
def scan():
    for pid in os.listdir('/proc'):
        if not pid.isdigit() or int(pid) == os.getpid(): continue
        try: cmd = open('/proc/%s/cmdline' % pid, 'rb').read().replace(b'\0', b' ').decode()
        except Exception: continue
        which = next((p for p in pats if p in cmd), None)
        if not which: continue
        try: tids = os.listdir('/proc/%s/task' % pid)
        except Exception: continue
        for tid in tids:
            try: s = open('/proc/%s/task/%s/stat' % (pid, tid)).read()
            except Exception: continue
            name = s[s.index('(')+1:s.rindex(')')]
            f = s[s.rindex(')')+2:].split()
            t = (int(f[11]) + int(f[12])) / hz
            k = (which, pid, tid, name)
            first.setdefault(k, t); last[k] = t
def dump(*_):
    agg = {}
    for k, t in last.items():
        key = '%s|%s' % (k[0], k[3])
        a = agg.setdefault(key, [0.0, 0, 0.0])
        d = t - first[k]; a[0] += d; a[1] += 1; a[2] = max(a[2], d)
    rows = sorted(agg.items(), key=lambda x: -x[1][0])
    with open(outf, 'w') as fh:
        for key, (tot, n, mx) in rows:
            fh.write('%-60s cpu_s %8.2f threads %4d max_thread %7.2f\n' % (key, tot, n, mx))
    sys.exit(0)
signal.signal(signal.SIGTERM, dump)
while True:
    scan(); time.sleep(1)
