# loom models of the cursor, preemption bound 3 (about 15 s). A deeper run:
#   LOOM_MAX_PREEMPTIONS=4 scripts/loom.sh
LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-3} scripts/loom.sh
