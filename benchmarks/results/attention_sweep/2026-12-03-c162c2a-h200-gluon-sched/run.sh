export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=/tmp/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
ok=g128_pp,g128n64_pp_ovl
for v in g128_pp_sched g128_pp_ovl_sched g128n64_pp_sched g128n64_pp_ovl_sched; do
  timeout 75 python3 benchmarks/attention_gluon.py --problems none --variants $v --out $R/c_$v.json > $R/c_$v.log 2>&1; rc=$?
  echo "$v rc=$rc" >> $R/checks_rc.txt
  [ $rc = 0 ] && ok=$ok,$v
done
timeout 320 python3 benchmarks/attention_gluon.py --variants $ok --problems subset --rounds 3 --out $R/subset.json > $R/subset_log.txt 2>&1
echo "subset rc=$?" >> $R/checks_rc.txt
tar czf $OUT/results.tgz -C $R .
cat $R/checks_rc.txt; grep -h -i "wrong\|error\|fail" $R/c_*.log | head -8; tail -45 $R/subset_log.txt
