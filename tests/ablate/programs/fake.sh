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
# the receipt of the run contract: what it "attached" (a variant with a Dropout or DropBlock)
if grep -q '"transform"' "$PLUGDROP_SPEC"; then
  echo '{"by": "fake.sh", "attachments": [{"label": "spec", "layers": ["layer1"], "calls": 3}]}' > "$PLUGDROP_RECEIPT"
fi
echo "done: seed $PLUGDROP_SEED variant $PLUGDROP_VARIANT"
