'use strict'
// The shared conformance vectors (conformance/vectors.json), run through the
// Node binding.

const test = require('node:test')
const assert = require('node:assert/strict')
const grantid = require('..')
const { loadVectors, codeOf } = require('./helpers')

const vectors = loadVectors()
const SAFE = BigInt(Number.MAX_SAFE_INTEGER)

const layoutOf = (v) => ({
  timestampBits: Number(v.timestamp_bits),
  workerBits: Number(v.worker_bits),
  sequenceBits: Number(v.sequence_bits),
  epochMs: Number(v.epoch_ms),
  tickMs: Number(v.tick_ms),
  datacenterBits: Number(v.datacenter_bits),
})
const codeOfKind = (kind) => grantid.errorCodes().find((c) => c.replace(/_/g, '') === kind.toUpperCase())

test('the vectors are there', () => {
  assert.ok(vectors.layouts.length >= 1)
  assert.ok(vectors.invalid_layouts.length >= 1)
  assert.ok(vectors.parse_invalid.length >= 1)
})

for (const v of vectors.layouts) {
  test(`layout ${v.name}: encode and decode`, () => {
    const layout = layoutOf(v)
    for (const c of v.encode) {
      const [t, w, s] = [BigInt(c.timestamp), BigInt(c.worker), BigInt(c.sequence)]
      assert.equal(grantid.encode(t, w, s, layout), String(c.id))
      const big = grantid.decodeBigInt(String(c.id), layout)
      assert.deepEqual([big.timestamp, big.worker, big.sequence], [t, w, s])
      assert.equal(big.unixMs, BigInt(c.unix_ms))
      assert.deepEqual([big.datacenter, big.datacenterWorker], [BigInt(c.datacenter), BigInt(c.datacenter_worker)])
      assert.deepEqual(grantid.decodeBigInt(BigInt(c.id), layout), big)
      if (t <= SAFE && w <= SAFE && s <= SAFE && BigInt(c.unix_ms) <= SAFE) {
        const d = grantid.decode(String(c.id), layout)
        assert.deepEqual(d, {
          timestamp: Number(t),
          worker: Number(w),
          sequence: Number(s),
          unixMs: Number(c.unix_ms),
          datacenter: Number(c.datacenter),
          datacenterWorker: Number(c.datacenter_worker),
        })
      } else {
        // A field a number cannot hold exactly is refused, never rounded.
        assert.equal(codeOf(() => grantid.decode(String(c.id), layout)), 'INVALID_ARGUMENT')
      }
    }
    for (const c of v.encode_invalid ?? []) {
      const code = codeOf(() =>
        grantid.encode(BigInt(c.timestamp), BigInt(c.worker), BigInt(c.sequence), layout),
      )
      assert.equal(code, codeOfKind(c.kind), JSON.stringify(c))
    }
    for (const c of v.decode_invalid) {
      assert.equal(codeOf(() => grantid.decode(String(c.id), layout)), codeOfKind(c.kind))
      assert.equal(codeOf(() => grantid.decodeBigInt(BigInt(c.id), layout)), codeOfKind(c.kind))
    }
  })
}

test('invalid layouts name the field', () => {
  for (const v of vectors.invalid_layouts) {
    let error
    try {
      grantid.layout(layoutOf(v))
    } catch (e) {
      error = e
    }
    assert.ok(error instanceof Error, JSON.stringify(v))
    assert.equal(error.code, codeOfKind(v.kind))
    assert.match(error.message, new RegExp(v.field))
  }
})

test('parse: valid and invalid texts', () => {
  for (const c of vectors.parse_valid ?? []) {
    assert.equal(grantid.parseId(c.text), String(c.id))
    assert.equal(grantid.decodeBigInt(c.text).timestamp >= 0n, true)
  }
  for (const text of vectors.parse_invalid) {
    assert.equal(codeOf(() => grantid.parseId(text)), 'INVALID_ARGUMENT', JSON.stringify(text))
    assert.equal(codeOf(() => grantid.decode(text)), 'INVALID_ARGUMENT', JSON.stringify(text))
  }
})

test('an ID as a JS number is refused', () => {
  assert.equal(codeOf(() => grantid.decode(20497, layoutOf(vectors.layouts[0]))), 'INVALID_ARGUMENT')
  assert.equal(codeOf(() => grantid.decode(-1n)), 'INVALID_ARGUMENT')
  assert.equal(codeOf(() => grantid.decode(1n << 63n)), 'INVALID_ARGUMENT')
})
