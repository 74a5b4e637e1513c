# loom models of the cursor, preemption bound 3 (about 1 min on 2 busy CPUs). A deeper run:
#   LOOM_MAX_PREEMPTIONS=4 scripts/loom.sh
LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-3} scripts/loom.sh
