# The deployment fuzzer's negative controls: each fix of a duplicate path
# reverted in a scratch copy must be caught (docs/RELIABILITY.md).
scripts/deploy-fuzz-controls.sh
