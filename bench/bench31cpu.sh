#!/bin/bash
# CPU time per cycle (user+sys of the whole test process / cycles) of
# distlock's machinery benchmarks, old vs new test binaries alternated:
# robust to a loaded machine, unlike ns/op.
# usage: bench31cpu.sh OLD.test NEW.test ROUNDS N
old=$1 new=$2 rounds=${3:-5} n=${4:-200000}
out=/tmp/bench31cpu.txt; : > $out
for i in $(seq $rounds); do
  for b in 'Machinery/auto-refresh$' 'Machinery/no-refresh$' 'Machinery/owner$' 'Memory/try-acquire$' 'Memory/acquire$'; do
    for v in old new; do
      bin=$old; [ $v = new ] && bin=$new
      /usr/bin/time -o /tmp/bench31.time -f "%U %S" $bin -test.run '^$' -test.bench "$b" -test.benchtime ${n}x -test.count 1 >/dev/null 2>&1
      t=$(tail -1 /tmp/bench31.time)
      echo "$v $b $t" >> $out
    done
  done
done
python3 - $out $n <<'PY'
import sys,statistics,collections
n=int(sys.argv[2]); d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    v,b,u,s=l.split(); d[(b,v)].append((float(u)+float(s))/n*1e9)
print(f"{'benchmark':28s} {'old CPU ns/cycle':>17s} {'new CPU ns/cycle':>17s} {'new/old':>8s}")
for b in sorted({k[0] for k in d}):
    o=statistics.median(d[(b,'old')]); w=statistics.median(d[(b,'new')])
    print(f"{b:28s} {o:17.0f} {w:17.0f} {w/o:8.3f}   (old {min(d[(b,'old')]):.0f}-{max(d[(b,'old')]):.0f}, new {min(d[(b,'new')]):.0f}-{max(d[(b,'new')]):.0f})")
PY
