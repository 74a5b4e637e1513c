'use strict'
// PublicIds per call, beside sqids and hashids (docs/PUBLIC_IDS.md).
//
//   cd bindings-node && npx napi build --release --output-dir bench/build
//   cd bench && npm ci && node public_ids.js
//
// Each row maps 4,096 IDs spread over [2^40, 2^63) (so the cycle walk's
// length varies as in use) per pass; prints the median ns per call of
// interleaved rounds. Environment: GRANTID_NODE_ADDON (default
// build/grantid.node), BENCH_ROUNDS (default 15), BENCH_ROUND_MS (default 100).
// A peer that is not installed is reported as such.

const path = require('node:path')

const addonPath = process.env.GRANTID_NODE_ADDON || path.join(__dirname, 'build', 'grantid.node')
const { PublicIds } = require(path.resolve(addonPath))

const ROUNDS = Number(process.env.BENCH_ROUNDS || 15)
const ROUND_MS = Number(process.env.BENCH_ROUND_MS || 100)
const N = 4096

let sink = 0
function pass(fn, inputs, passes) {
  const t0 = process.hrtime.bigint()
  for (let p = 0; p < passes; p++) {
    for (let i = 0; i < inputs.length; i++) {
      const v = fn(inputs[i])
      sink ^= typeof v === 'string' ? v.length : typeof v === 'bigint' ? Number(v & 0xffn) : 1
    }
  }
  return Number(process.hrtime.bigint() - t0) / (passes * inputs.length)
}

function main() {
  let x = 0x9e3779b97f4a7c15n
  const big = []
  for (let i = 0; i < N; i++) {
    x = (x * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n)
    big.push((x >> 1n) | (1n << 40n))
  }
  const str = big.map(String)
  const ids = new PublicIds(Buffer.from('public-ids-bench'))
  const rows = [
    { name: 'Number(x) (call floor)', fn: Number, inputs: str },
    { name: 'encode(id: string) -> string', fn: (v) => ids.encode(v), inputs: str },
    { name: 'encodeBigInt(id: bigint) -> bigint', fn: (v) => ids.encodeBigInt(v), inputs: big },
    { name: 'decode(public: string) -> string', fn: (v) => ids.decode(v), inputs: str.map((v) => ids.encode(v)) },
    { name: 'decodeBigInt(public: bigint) -> bigint', fn: (v) => ids.decodeBigInt(v), inputs: big.map((v) => ids.encodeBigInt(v)) },
    { name: 'encodeStr(id: string) -> text', fn: (v) => ids.encodeStr(v), inputs: str },
    { name: 'decodeStr(text) -> string', fn: (v) => ids.decodeStr(v), inputs: str.map((v) => ids.encodeStr(v)) },
  ]
  const missing = []
  try {
    const Sqids = require('sqids').default
    const sqids = new Sqids()
    // sqids takes numbers only: IDs above 2^53 cannot be encoded exactly.
    const nums = big.map((v) => Number(v >> 11n))
    rows.push({ name: 'sqids encode([n]) (n < 2^53)', fn: (v) => sqids.encode([v]), inputs: nums })
    rows.push({ name: 'sqids decode(text)', fn: (v) => sqids.decode(v), inputs: nums.map((v) => sqids.encode([v])) })
  } catch (e) {
    missing.push(['sqids', e.message])
  }
  try {
    const Hashids = require('hashids')
    const hashids = new Hashids('public-ids-bench')
    rows.push({ name: 'hashids encode(bigint)', fn: (v) => hashids.encode(v), inputs: big })
    rows.push({ name: 'hashids decode(text)', fn: (v) => hashids.decode(v), inputs: big.map((v) => hashids.encode(v)) })
  } catch (e) {
    missing.push(['hashids', e.message])
  }
  for (const r of rows) {
    r.passes = 1
    while (pass(r.fn, r.inputs, r.passes) * r.passes * N < ROUND_MS * 1e6 && r.passes < 1 << 20) r.passes *= 2
    r.samples = []
  }
  for (let k = 0; k < ROUNDS; k++) for (const r of rows) r.samples.push(pass(r.fn, r.inputs, r.passes))
  console.log(`node ${process.version}, ${ROUNDS} rounds, median ns per call`)
  console.log('| call | ns/call |')
  console.log('|---|---:|')
  for (const r of rows) {
    const s = [...r.samples].sort((a, b) => a - b)
    console.log(`| ${r.name} | ${s[Math.floor(s.length / 2)].toFixed(1)} |`)
  }
  for (const [name, why] of missing) console.log(`| ${name} | not installed (${why}) |`)
  if (sink === 0.5) console.log('')
}

main()
