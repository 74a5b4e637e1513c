'use strict'
// IDs from a running generator: strings that round-trip exactly, unique and
// strictly increasing in a tight loop.

const test = require('node:test')
const assert = require('node:assert/strict')
const { Generator } = require('..')
const { memoryAuthority, less } = require('./helpers')

test('every ID is a decimal string that round-trips through BigInt and JSON', async () => {
  const gen = await Generator.start({ grantSource: memoryAuthority(), namespace: 'ids-v1' })
  try {
    const ids = [gen.nextId(), ...gen.nextIds(1000), String(gen.nextIdBigInt())]
    for (const id of ids) {
      assert.equal(typeof id, 'string')
      assert.match(id, /^[1-9][0-9]*$/)
      const big = BigInt(id)
      assert.ok(big > 0n && big < 1n << 63n)
      assert.equal(String(big), id)
      assert.equal(JSON.parse(JSON.stringify({ id })).id, id)
      assert.equal(typeof gen.nextIdBigInt(), 'bigint')
    }
    // Past 2^53 a number would already have rounded: the strings are exact.
    assert.ok(BigInt(ids[0]) > BigInt(Number.MAX_SAFE_INTEGER))
    const d = gen.decode(ids[0])
    assert.equal(d.worker, gen.stats().worker)
    assert.deepEqual(gen.decode(BigInt(ids[0])), d)
    assert.ok(Math.abs(d.unixMs - Date.now()) < 60_000)
  } finally {
    gen.close()
  }
})

test('1,000,000 IDs in a tight loop: no duplicate, strictly increasing', async () => {
  // A JS source answers on the JS thread, which this loop keeps busy: grant
  // enough time up front that the loop never needs a renewal.
  const gen = await Generator.start({
    grantSource: memoryAuthority(),
    namespace: 'loop-v1',
    grantDurationMs: 60_000,
    horizonMs: 60_000,
  })
  try {
    const n = 1_000_000
    const ids = new Array(n)
    for (let i = 0; i < n; i++) ids[i] = gen.nextId()
    let notIncreasing = 0
    for (let i = 1; i < n; i++) if (!less(ids[i - 1], ids[i])) notIncreasing++
    assert.equal(notIncreasing, 0)
    assert.equal(new Set(ids).size, n)
    assert.ok(gen.stats().idsIssued >= n)
  } finally {
    gen.close()
  }
})

test('nextIds returns increasing batches, all or none', async () => {
  const gen = await Generator.start({
    grantSource: memoryAuthority(),
    namespace: 'batch-v1',
    maxBatch: 5000,
  })
  try {
    const a = gen.nextIds(5000)
    const b = gen.nextIds(5000)
    assert.equal(a.length, 5000)
    const all = [...a, ...b]
    for (let i = 1; i < all.length; i++) assert.ok(less(all[i - 1], all[i]))
    assert.deepEqual(gen.nextIds(0), [])
    const before = gen.stats().idsIssued
    assert.throws(() => gen.nextIds(5001), { code: 'INVALID_ARGUMENT' })
    assert.equal(gen.stats().idsIssued, before)
  } finally {
    gen.close()
  }
})

test('stats, namespace and layout are reported', async () => {
  const source = memoryAuthority()
  const gen = await Generator.start({
    grantSource: source,
    namespace: 'stats-v1',
    layout: { timestampBits: 41, workerBits: 10, sequenceBits: 12 },
  })
  try {
    gen.nextIds(10)
    const s = gen.stats()
    assert.ok(s.idsIssued >= 10)
    assert.ok(s.grantsAcquired >= 1)
    assert.equal(typeof s.incarnation, 'bigint')
    assert.equal(s.incarnation, source.grants[0].incarnation)
    assert.equal(s.worker, 0)
    assert.ok(s.grantEnd > 0 && s.remainingTicks > 0)
    assert.equal(gen.namespace, 'stats-v1')
    assert.equal(gen.layout.workerBits, 10)
    assert.equal(gen.closed, false)
  } finally {
    gen.close()
  }
  assert.equal(gen.closed, true)
})
