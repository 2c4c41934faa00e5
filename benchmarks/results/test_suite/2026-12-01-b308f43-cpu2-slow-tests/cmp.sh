#!/bin/bash
# usage: cmp.sh TAG FILES... ; runs base then new for each file, niced, durations to logs
tag=$1; shift
for f in "$@"; do
  n=$(echo $f | tr '/:' '__')
  for side in base new; do
    dir=/tmp/suite/base; [ $side = new ] && dir=/work/wt/suite
    echo "== $side $f $(uptime)" >> /tmp/suite/cmp_$tag.progress
    (cd $dir && PYTHONPATH=$dir nice python3 -m pytest -q -p no:cacheprovider --durations=0 -vv $f > /tmp/suite/cmp_${tag}_${side}_$n.log 2>&1)
  done
done
echo "== all done $(uptime)" >> /tmp/suite/cmp_$tag.progress
