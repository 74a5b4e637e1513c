# Churn, long form (docs/FLEET.md): 100,000 starts, 360 live, against its own
# throwaway PostgreSQL, then the same through `grantid serve`.
scripts/churn-long.sh
scripts/churn-long.sh --grpc --out "$CARGO_TARGET_DIR/churn/long-grpc"
