'use strict'
// Every error code of grantid::ErrorKind is reachable from JS, as an Error
// with a stable `code`.

const test = require('node:test')
const assert = require('node:assert/strict')
const grantid = require('..')
const { Generator, ManualClock } = grantid
const { memoryAuthority, sleep, codeOf, rejectionCode } = require('./helpers')

const reached = new Set()
const seen = (code) => {
  reached.add(code)
  return code
}

test('INVALID_ARGUMENT: bad ids, counts, layouts and options', async () => {
  assert.equal(seen(codeOf(() => grantid.decode('abc'))), 'INVALID_ARGUMENT')
  assert.equal(codeOf(() => grantid.layout({ sequenceBits: 0 })), 'INVALID_ARGUMENT')
  for (const options of [
    {},
    { namespace: 'x' },
    { namespace: 'x', grantSource: 42 },
    { namespace: '', grantSource: memoryAuthority() },
    { namespace: 'x', grantSource: memoryAuthority(), layout: { timestampBits: 54, workerBits: 0, sequenceBits: 9 } },
    { namespace: 'x', grantSource: memoryAuthority(), maxDriftMs: -1 },
    { namespace: 'x', grantSource: memoryAuthority(), forkPolicy: 'sometimes' },
    { namespace: 'x', grantSource: 'nosuchscheme:1' },
  ]) {
    let code
    try {
      const g = await Generator.start(options)
      g.close()
      code = 'NO_ERROR'
    } catch (e) {
      assert.ok(e instanceof Error)
      code = e.code
    }
    assert.equal(code, 'INVALID_ARGUMENT', JSON.stringify(options, (k, v) => (typeof v === 'function' ? 'fn' : v)))
  }
  const gen = await Generator.start({ grantSource: memoryAuthority(), namespace: 'inv-v1' })
  try {
    assert.equal(codeOf(() => gen.nextIds(1.5)), 'INVALID_ARGUMENT')
    assert.equal(codeOf(() => gen.nextIds('3')), 'INVALID_ARGUMENT')
    assert.equal(codeOf(() => gen.decode(123)), 'INVALID_ARGUMENT')
  } finally {
    gen.close()
  }
})

test('CLOSED after close()', async () => {
  const gen = await Generator.start({ grantSource: memoryAuthority(), namespace: 'closed-v1' })
  gen.nextId()
  gen.close()
  gen.close()
  assert.equal(seen(codeOf(() => gen.nextId())), 'CLOSED')
  assert.equal(codeOf(() => gen.nextIds(2)), 'CLOSED')
})

test('UNAVAILABLE when the source never answers a grant', async () => {
  const e = await rejectionCode(
    Generator.start({
      grantSource: () => new Promise(() => {}),
      namespace: 'unavail-v1',
      startupTimeoutMs: 200,
      sourceTimeoutMs: 50,
    }),
  )
  assert.equal(seen(e.code), 'UNAVAILABLE')
  assert.match(e.message, /did not answer within 50 ms/)
})

test('LEASE_LOST when the authority refuses every worker', async () => {
  const e = await rejectionCode(
    Generator.start({
      grantSource: () => {
        throw Object.assign(new Error('all 1024 workers are held'), { code: 'LEASE_LOST' })
      },
      namespace: 'lost-v1',
      startupTimeoutMs: 200,
    }),
  )
  assert.equal(seen(e.code), 'LEASE_LOST')
  assert.match(e.message, /workers are held/)
})

test('NOT_YET_VALID when the grant starts in the future', async () => {
  const gen = await Generator.start({
    namespace: 'future-v1',
    maxWaitMs: 5,
    grantSource: (r) => ({
      namespace: r.namespace,
      worker: 1,
      incarnation: r.incarnation,
      grantId: r.requestId,
      start: Math.max(r.notBefore, r.now + 600_000),
      end: Math.max(r.notBefore, r.now + 600_000) + r.duration,
    }),
  })
  try {
    assert.equal(seen(codeOf(() => gen.nextId())), 'NOT_YET_VALID')
  } finally {
    gen.close()
  }
})

test('CAPACITY_EXHAUSTED when the sequence runs out and waiting is not allowed', async () => {
  const gen = await Generator.start({
    grantSource: memoryAuthority(),
    namespace: 'capacity-v1',
    layout: { timestampBits: 41, workerBits: 10, sequenceBits: 1 },
    maxDriftMs: 0,
    maxWaitMs: 0,
  })
  try {
    assert.equal(seen(codeOf(() => gen.nextIds(1000))), 'CAPACITY_EXHAUSTED')
  } finally {
    gen.close()
  }
})

test('CLOCK_ROLLBACK when the clock steps back past maxDriftMs', async () => {
  const clock = new ManualClock(Date.now())
  const gen = await Generator.start({
    grantSource: memoryAuthority(),
    namespace: 'rollback-v1',
    clock,
    maxWaitMs: 5,
  })
  try {
    gen.nextId()
    clock.set(clock.now() - 10_000)
    assert.equal(seen(codeOf(() => gen.nextId())), 'CLOCK_ROLLBACK')
    assert.ok(gen.stats().clockRollbacks >= 1)
  } finally {
    gen.close()
  }
})

test('GRANT_EXHAUSTED when the timestamp field is used up', async () => {
  const limit = 2 ** 20
  const gen = await Generator.start({
    namespace: 'exhausted-v1',
    // 150 ms before the last tick of a 20-bit timestamp.
    layout: { timestampBits: 20, workerBits: 2, sequenceBits: 8, epochMs: Date.now() - (limit - 150) },
    maxWaitMs: 1,
    grantSource: (r) => {
      const start = Math.max(r.now, r.notBefore)
      const end = Math.min(start + r.duration, limit)
      if (start >= end) throw new Error('no timestamp space left')
      return { namespace: r.namespace, worker: 0, incarnation: r.incarnation, grantId: r.requestId, start, end }
    },
  })
  try {
    let code
    const until = Date.now() + 3000
    while (Date.now() < until) {
      code = codeOf(() => gen.nextId())
      if (code !== 'NO_ERROR') break
      await sleep(10)
    }
    assert.equal(seen(code), 'GRANT_EXHAUSTED')
  } finally {
    gen.close()
  }
})

test('every code of the core was reached', () => {
  assert.deepEqual([...reached].sort(), [...grantid.errorCodes()].sort())
  assert.deepEqual(grantid.errorCodes(), [
    'NOT_YET_VALID',
    'GRANT_EXHAUSTED',
    'UNAVAILABLE',
    'CAPACITY_EXHAUSTED',
    'CLOCK_ROLLBACK',
    'LEASE_LOST',
    'INVALID_ARGUMENT',
    'CLOSED',
  ])
})
