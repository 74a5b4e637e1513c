'use strict'
// JS grant sources: promises that resolve late, rejections, junk answers,
// a confirmed loss, and a blocked event loop.

const test = require('node:test')
const assert = require('node:assert/strict')
const { Generator } = require('..')
const { memoryAuthority, sleep, rejectionCode } = require('./helpers')

test('an async source that resolves late still starts the generator', async () => {
  const inner = memoryAuthority()
  let calls = 0
  const source = async (request) => {
    calls++
    // The first answer comes after the renewal thread stopped waiting; the
    // retry reuses the request id and gets the recorded grant.
    await sleep(calls === 1 ? 300 : 5)
    return inner(request)
  }
  const gen = await Generator.start({
    grantSource: source,
    namespace: 'late-v1',
    sourceTimeoutMs: 100,
  })
  try {
    assert.match(gen.nextId(), /^\d+$/)
    assert.ok(gen.stats().uncertainRetries >= 1)
    const first = inner.grants[0]
    assert.equal(inner.grants.filter((g) => g.incarnation === first.incarnation && g.grantId === first.grantId).length, 1)
  } finally {
    gen.close()
  }
})

test('a rejecting or throwing source is unavailable', async () => {
  for (const grantSource of [
    async () => {
      throw new Error('authority down')
    },
    () => {
      throw new Error('authority down')
    },
    () => Promise.reject(new Error('authority down')),
  ]) {
    const e = await rejectionCode(
      Generator.start({ grantSource, namespace: 'down-v1', startupTimeoutMs: 600 }),
    )
    assert.equal(e.code, 'UNAVAILABLE')
    assert.match(e.message, /authority down/)
  }
  // Not even an Error: still unavailable.
  const e = await rejectionCode(
    Generator.start({
      grantSource: () => Promise.reject('plain string'),
      namespace: 'down-v1',
      startupTimeoutMs: 200,
    }),
  )
  assert.equal(e.code, 'UNAVAILABLE')
})

test('junk answers are invalid grants, reported with the field name', async () => {
  const good = memoryAuthority()
  const cases = [
    [() => null, /expected an object/],
    [() => 42, /expected an object/],
    [(r) => ({ ...good(r), worker: undefined }), /`worker` is missing/],
    [(r) => ({ ...good(r), worker: 'seven' }), /`worker` must be an integer/],
    [(r) => ({ ...good(r), start: 1.5 }), /`start` must be a non-negative safe integer/],
    [(r) => ({ ...good(r), end: -1 }), /`end`/],
    [(r) => ({ ...good(r), incarnation: Number(r.incarnation) }), /`incarnation` must be a bigint or a decimal string/],
    [(r) => ({ ...good(r), incarnation: 5n }), /incarnation is 0x5/],
    [(r) => ({ ...good(r), namespace: 'other' }), /namespace/],
    [(r) => ({ ...good(r), namespace: 7 }), /`namespace` must be a string/],
    [(r) => ({ ...good(r), grantId: 'x1' }), /`grantId` must be a decimal string/],
    [async (r) => ({ ...good(r), end: undefined }), /`end` is missing/],
  ]
  for (const [grantSource, pattern] of cases) {
    const e = await rejectionCode(
      Generator.start({ grantSource, namespace: 'junk-v1', startupTimeoutMs: 600 }),
    )
    assert.equal(e.code, 'UNAVAILABLE', String(grantSource))
    assert.match(e.message, pattern)
  }
})

test('grant fields may come as bigints and decimal strings', async () => {
  const inner = memoryAuthority()
  const gen = await Generator.start({
    namespace: 'types-v1',
    grantSource: (r) => {
      const g = inner(r)
      return {
        ...g,
        incarnation: String(g.incarnation),
        grantId: BigInt(g.grantId),
        start: BigInt(g.start),
        end: g.end,
      }
    },
  })
  try {
    assert.match(gen.nextId(), /^\d+$/)
    assert.equal(gen.stats().invalidGrants, 0)
  } finally {
    gen.close()
  }
})

test('the request carries camelCase fields with a bigint incarnation', async () => {
  const inner = memoryAuthority()
  const seen = []
  const gen = await Generator.start({
    namespace: 'request-v1',
    grantSource: (r) => {
      seen.push(r)
      return inner(r)
    },
  })
  gen.close()
  const r = seen[0]
  assert.equal(r.namespace, 'request-v1')
  assert.equal(typeof r.incarnation, 'bigint')
  assert.equal(r.worker, null)
  assert.equal(typeof r.requestId, 'number')
  for (const k of ['notBefore', 'now', 'duration']) assert.ok(Number.isSafeInteger(r[k]), k)
  assert.deepEqual(Object.keys(r.layout).sort(), ['datacenterBits', 'epochMs', 'sequenceBits', 'tickMs', 'timestampBits', 'workerBits'])
})

test('LEASE_LOST from the source: onLeaseLost runs and issuing stops', async () => {
  const inner = memoryAuthority()
  let lost
  const lostSeen = new Promise((resolve) => {
    lost = resolve
  })
  // The generator never keeps the event loop alive by itself (a server
  // would): hold it open while waiting for the callback.
  const keepAlive = setInterval(() => {}, 1000)
  const gen = await Generator.start({
    namespace: 'lost-v1',
    grantSource: async (r) => {
      if (inner.grants.length === 0) return inner(r)
      throw Object.assign(new Error('worker taken over'), { code: 'LEASE_LOST' })
    },
    onLeaseLost: (event) => lost(event),
  })
  try {
    const event = await lostSeen
    assert.equal(event.worker, 0)
    assert.match(event.reason, /taken over/)
    assert.throws(() => gen.nextId(), { code: 'LEASE_LOST' })
    assert.ok(gen.stats().leaseLosses >= 1)
  } finally {
    clearInterval(keepAlive)
    gen.close()
  }
})

test('a blocked event loop stalls renewal but no ID passes the grants', async () => {
  const source = memoryAuthority()
  const gen = await Generator.start({
    grantSource: source,
    namespace: 'blocked-v1',
    grantDurationMs: 20,
    horizonMs: 40,
    sourceTimeoutMs: 50,
    maxWaitMs: 1,
  })
  try {
    const ids = []
    const codes = new Set()
    const until = Date.now() + 400
    while (Date.now() < until) {
      try {
        ids.push(gen.nextIdBigInt())
      } catch (e) {
        codes.add(e.code)
      }
    }
    // The source could not run while the loop was blocked: the grants it
    // made before are all there is, and every ID lies inside them.
    const lastEnd = Math.max(...source.grants.map((g) => g.end))
    assert.ok(ids.length > 0)
    for (const id of ids) assert.ok(gen.decode(id).timestamp < lastEnd)
    assert.deepEqual([...codes], ['UNAVAILABLE'])
    // Once the loop is free, renewal resumes.
    let again
    for (let i = 0; i < 100 && again === undefined; i++) {
      await sleep(20)
      try {
        again = gen.nextId()
      } catch {}
    }
    assert.match(again, /^\d+$/)
  } finally {
    gen.close()
  }
})

// A grant source whose promises never settle, each kept alive as a request
// stuck on a socket would be (every call's handlers live as long as its
// promise); `calls()` counts the calls.
function neverSettling() {
  const kept = []
  const source = () => {
    const p = new Promise(() => {})
    kept.push(p)
    return p
  }
  return { source, calls: () => kept.length }
}

test('a promise that never settles is not called again on every retry', async () => {
  const { source, calls } = neverSettling()
  await assert.rejects(
    Generator.start({
      grantSource: source,
      namespace: 'never-v1',
      sourceTimeoutMs: 20,
      // Shorter than the 15 timeouts after which a pending call is given up.
      startupTimeoutMs: 200,
      backoffMinMs: 1,
      backoffMaxMs: 2,
    }),
    (e) => e.code === 'UNAVAILABLE' && /never settle/.test(e.message),
  )
  assert.equal(calls(), 1, `the source was called ${calls()} times while its promise was pending`)
})

test('a promise pending for 15 source timeouts is given up for a new call', async () => {
  const inner = memoryAuthority()
  const requestIds = []
  const kept = []
  const source = (request) => {
    requestIds.push(request.requestId)
    if (requestIds.length > 1) return inner(request)
    const p = new Promise(() => {})
    kept.push(p)
    return p
  }
  const gen = await Generator.start({
    grantSource: source,
    namespace: 'given-up-v1',
    sourceTimeoutMs: 20,
    startupTimeoutMs: 3000,
    backoffMinMs: 1,
    backoffMaxMs: 2,
  })
  try {
    assert.match(gen.nextId(), /^\d+$/)
    // The second call is the retry of the first request (renewals may
    // follow it at once).
    assert.ok(requestIds.length >= 2)
    assert.equal(requestIds[1], requestIds[0])
  } finally {
    gen.close()
  }
})

test('a source whose promises never settle holds at most four of them', async () => {
  const { source, calls } = neverSettling()
  // Fifteen timeouts of 20 ms: a call given up every 300 ms, were it not
  // for the bound.
  await assert.rejects(
    Generator.start({
      grantSource: source,
      namespace: 'bound-v1',
      sourceTimeoutMs: 20,
      startupTimeoutMs: 2500,
      backoffMinMs: 1,
      backoffMaxMs: 2,
    }),
    (e) => e.code === 'UNAVAILABLE' && /4 calls are still unanswered, the most allowed/.test(e.message),
  )
  assert.equal(calls(), 4, `the source was called ${calls()} times while its promises were pending`)
})
