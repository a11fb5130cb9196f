#!/bin/sh
# A training program that is not Python: the run contract read by a POSIX shell. Its metric
# `score` is higher for a variant whose spec holds a Dropout; it logs three "epochs".
set -eu
cp "$PLUGDROP_SPEC" "$PLUGDROP_RUN_DIR/spec.copy"
bonus=0
if grep -q '"Dropout"' "$PLUGDROP_SPEC"; then bonus=2; fi
for epoch in 1 2 3; do
  echo "{\"epoch\": $epoch, \"score\": 0.$((5 + bonus))$((PLUGDROP_SEED % 10))$epoch, \"resume\": $PLUGDROP_RESUME}" >> "$PLUGDROP_METRICS"
done
echo "done: seed $PLUGDROP_SEED variant $PLUGDROP_VARIANT"
