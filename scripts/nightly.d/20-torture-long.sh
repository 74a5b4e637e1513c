# Fault-injection torture, long forms (docs/RELIABILITY.md): 16 minutes
# against PostgreSQL, then the 10-minute state-loss run against Redis. Each
# starts its own throwaway servers.
scripts/torture-long.sh
scripts/torture-long.sh --state-loss
