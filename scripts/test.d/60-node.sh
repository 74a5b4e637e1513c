# Node package (bindings-node): npm ci from the committed lockfile, the napi
# build (the dev profile on the workspace's build: only grantid-node is
# compiled again, scripts/lib/napi-cargo.sh), the node --test suite, the
# index.d.ts / index.js drift check, and tsc --noEmit on a sample using
# the API. The release addon is built once, by the package tier.
cd bindings-node
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node and npm are required (Node >= 20): install them, e.g. apt-get install -y nodejs npm" >&2
  exit 1
fi
npm_ci .
CARGO="$GRANTID_ROOT/scripts/lib/napi-cargo.sh" npx napi build --platform --features etcd,dynamodb
# node --test runs every *.test.js / *.test.mjs under __test__/.
node --test --test-reporter=spec __test__/
# The committed declarations and loader must match what the build generates.
git diff --exit-code -- index.d.ts index.js || {
  echo "bindings-node/index.d.ts or index.js drifted from the Rust sources: run 'npx napi build --platform' and commit them" >&2
  exit 1
}
npx tsc -p __test__/types
