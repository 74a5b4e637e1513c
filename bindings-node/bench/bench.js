'use strict'
// nextId against the ID generators Node.js users pick instead, in one run.
//
//   cd bindings-node && npx napi build --release --output-dir bench/build
//   cd bench && npm ci && node bench.js
//
// Prints ns per ID of each generator (median of interleaved rounds), each
// one's ratio to grantid's nextId, and the duplicates each produced in a
// tight loop of 1 M IDs (exit status 1 if grantid repeated one). Environment:
//   GRANTID_NODE_ADDON   the addon to load (default build/grantid.node)
//   BENCH_ROUNDS         interleaved rounds per generator (default 15)
//   BENCH_ROUND_MS       target length of one round in ms (default 100)
//   BENCH_DUP_IDS        IDs per duplicate loop (default 1000000)
// A peer that is not installed is reported as such, not measured.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const addonPath = process.env.GRANTID_NODE_ADDON || path.join(__dirname, 'build', 'grantid.node')
const { Generator } = require(path.resolve(addonPath))
const { candidates, duplicateLoops } = require('./generators')

const ROUNDS = Number(process.env.BENCH_ROUNDS || 15)
const ROUND_MS = Number(process.env.BENCH_ROUND_MS || 100)
const DUP_IDS = Number(process.env.BENCH_DUP_IDS || 1_000_000)

let sink = 0
/** Consumes a value so the loop cannot be optimised away. */
function use(v) {
  sink ^= typeof v === 'string' ? v.length : typeof v === 'bigint' ? Number(v & 0xffn) : 1
}

/** Calls `fn` `n` times; returns ns per ID (`fn` makes `perCall` IDs). */
function timeLoop(fn, n, perCall) {
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) use(fn())
  return Number(process.hrtime.bigint() - t0) / (n * perCall)
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]
}

function measure(list) {
  // Calibrate each loop to about ROUND_MS, then run the rounds interleaved so
  // that load from elsewhere on the machine falls on every generator alike.
  for (const c of list) {
    c.n = 1000
    timeLoop(c.fn, c.n, c.perCall)
    while (c.n * timeLoop(c.fn, c.n, c.perCall) * c.perCall < ROUND_MS * 1e6 / 4) c.n *= 2
    c.n *= 4
    c.samples = []
  }
  for (let r = 0; r < ROUNDS; r++) {
    for (const c of list) c.samples.push(timeLoop(c.fn, c.n, c.perCall))
  }
  for (const c of list) c.ns = median(c.samples)
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'grantid-node-bench-'))
  const grantSource = `file:${path.join(dir, 'state.json')}`
  // Capacity does not bind: 22 sequence bits (4.2 M IDs per ms).
  const unbound = await Generator.start({
    grantSource,
    namespace: 'bench-unbound',
    layout: { timestampBits: 41, workerBits: 0, sequenceBits: 22 },
    maxDriftMs: 1000,
  })
  // The default layout (4,096 IDs per ms, 100 ms drift) for the duplicate loop.
  const snowflake = await Generator.start({ grantSource, namespace: 'bench-default' })
  const failures = []
  try {
    const list = candidates(unbound)
    const measured = list.filter((c) => !c.missing)
    measure(measured)
    const base = measured.find((c) => c.name === 'grantid nextId').ns
    const peers = measured.filter((c) => c.peer)
    const fastest = peers.reduce((a, b) => (a && a.ns <= b.ns ? a : b), null)

    console.log(`node ${process.version}, ${ROUNDS} rounds, median ns per ID`)
    console.log('| generator | returns | ns/ID | ratio to grantid nextId |')
    console.log('|---|---|---:|---:|')
    for (const c of list) {
      if (c.missing) {
        console.log(`| ${c.name} | - | not installed (${c.missing}) | - |`)
      } else {
        console.log(`| ${c.name} | ${c.returns} | ${c.ns.toFixed(1)} | ${(c.ns / base).toFixed(2)}x |`)
      }
    }
    if (fastest) {
      console.log(`\nnextId is ${(fastest.ns / base).toFixed(2)}x faster than the fastest peer (${fastest.name}); target >= 1.7x`)
    }

    // The async batch: one libuv thread-pool round trip per call.
    const asyncNs = []
    for (let r = 0; r < ROUNDS; r++) {
      const calls = 200
      const t0 = process.hrtime.bigint()
      for (let i = 0; i < calls; i++) await unbound.nextIdsAsync(1000)
      asyncNs.push(Number(process.hrtime.bigint() - t0) / (calls * 1000))
    }
    asyncNs.sort((a, b) => a - b)
    const asyncMedian = asyncNs[Math.floor(asyncNs.length / 2)]
    console.log(`\nawait nextIdsAsync(1000): ${asyncMedian.toFixed(1)} ns per ID (${asyncMedian.toFixed(1)} us per call of 1000, off the JS thread)`)

    console.log(`\n| generator | IDs in a tight loop | duplicates | ms |`)
    console.log('|---|---:|---:|---:|')
    for (const d of duplicateLoops(snowflake)) {
      if (d.missing) {
        console.log(`| ${d.name} | - | not installed | - |`)
        continue
      }
      const seen = new Set()
      const t0 = process.hrtime.bigint()
      for (let i = 0; i < DUP_IDS; i++) seen.add(d.fn())
      const ms = Number(process.hrtime.bigint() - t0) / 1e6
      const duplicates = DUP_IDS - seen.size
      console.log(`| ${d.name} | ${DUP_IDS} | ${duplicates} | ${ms.toFixed(0)} |`)
      if (d.grantid && duplicates > 0) failures.push(`${d.name} repeated ${duplicates} IDs`)
    }
  } finally {
    unbound.close()
    snowflake.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
  if (sink === 0.5) console.log(sink)
  if (failures.length > 0) {
    console.error(failures.join('\n'))
    process.exitCode = 1
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
