# The loom models of the cursor at preemption bound 4 (the default tier
# runs bound 3).
LOOM_MAX_PREEMPTIONS=4 scripts/loom.sh
