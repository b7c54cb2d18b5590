#!/bin/bash
# kernel-only A/B: the same Python (main at 4ac56fa), the extension built before (old, d1be610's kernels) and after (new) the LSTM backward's no-clip NaN change
for r in 1 2 3 4 5 6; do  # run as two batches of three rounds in session 39
  for v in old new; do
    echo "### round $r $v $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    (cd /tmp/ab_$v && PYTHONPATH=/tmp/ab_$v /work/main/.venv/bin/python benchmarks/kernels.py --presets small --batches 32 --lengths 20 --repeats 5 --whole-model --no-kernels --threads 2 --peak-gflops 160 --out /tmp/ab2_${v}_$r 2>&1 | grep -E "train_step|whole_model")
  done
done
