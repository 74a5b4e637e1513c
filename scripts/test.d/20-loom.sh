# loom models of the cursor (see scripts/loom.sh for a deeper run).
LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2} scripts/loom.sh
