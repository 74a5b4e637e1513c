# The deployment fuzzer, long form: 30 minutes of drawn deployments with
# faults (docs/RELIABILITY.md, "Deployment fuzzer").
scripts/deploy-fuzz-long.sh 30
