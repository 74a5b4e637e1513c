'use strict'
// onEvent (the core's events on the JS thread) and nextIdsAsync (a batch
// that waits for a renewal without holding the event loop).

const test = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const path = require('node:path')
const { Generator, eventsInstalled } = require('..')
const { memoryAuthority, sleep, rejectionCode } = require('./helpers')

test('onEvent gets grant, grant_uncertain and closed events on the JS thread', async () => {
  const inner = memoryAuthority()
  let calls = 0
  const events = []
  const gen = await Generator.start({
    grantSource: (request) => {
      calls++
      if (calls <= 2) throw new Error('authority down')
      return inner(request)
    },
    namespace: 'events-v1',
    backoffMinMs: 5,
    backoffMaxMs: 10,
    onEvent: (e) => events.push(e),
  })
  assert.ok(eventsInstalled())
  assert.match(gen.nextId(), /^\d+$/)
  gen.close()
  for (let i = 0; i < 100 && !events.some((e) => e.event === 'closed'); i++) await sleep(10)
  const uncertain = events.filter((e) => e.event === 'grant_uncertain')
  assert.equal(uncertain.length, 2)
  assert.equal(uncertain[0].level, 'warn')
  assert.match(uncertain[0].message, /^event=grant_uncertain namespace=events-v1 .*authority down/)
  const grant = events.find((e) => e.event === 'grant')
  assert.equal(grant.level, 'debug')
  assert.match(grant.message, /namespace=events-v1 worker=0 /)
  assert.equal(events.find((e) => e.event === 'closed').level, 'info')
  // Only this generator's namespace, nothing after close.
  const other = await Generator.start({ grantSource: memoryAuthority(), namespace: 'events-other' })
  other.close()
  await sleep(50)
  assert.ok(events.every((e) => e.message.includes('namespace=events-v1')))
})

test('a lost lease is an error event', async () => {
  let calls = 0
  const inner = memoryAuthority()
  const events = []
  const gen = await Generator.start({
    grantSource: (request) => {
      calls++
      if (calls > 1) throw Object.assign(new Error('worker taken'), { code: 'LEASE_LOST' })
      return inner(request)
    },
    namespace: 'events-lost',
    grantDurationMs: 20,
    horizonMs: 40,
    backoffMinMs: 5,
    backoffMaxMs: 10,
    onEvent: (e) => events.push(e),
  })
  try {
    for (let i = 0; i < 200 && !events.some((e) => e.event === 'lease_lost'); i++) await sleep(10)
    const lost = events.find((e) => e.event === 'lease_lost')
    assert.ok(lost, 'no lease_lost event')
    assert.equal(lost.level, 'error')
    assert.match(lost.message, /worker taken/)
  } finally {
    gen.close()
  }
})

test('a throwing onEvent is an uncaught exception and does not stop issuance', () => {
  // In a child process: node:test turns an uncaught exception into a failure.
  const pkg = JSON.stringify(path.join(__dirname, '..'))
  const r = spawnSync(
    process.execPath,
    [
      '-e',
      `const { Generator } = require(${pkg})
      let uncaught = 0
      process.on('uncaughtException', (e) => { if (e.message === 'listener bug') uncaught++; else throw e })
      ;(async () => {
        const gen = await Generator.start({ grantSource: 'static:3', namespace: 'events-throw',
          grantDurationMs: 20, horizonMs: 40, onEvent: () => { throw new Error('listener bug') } })
        let ids = 0
        for (let i = 0; i < 20; i++) {
          ids += (await gen.nextIdsAsync(100)).length
          await new Promise((r) => setTimeout(r, 5))
        }
        gen.close()
        await new Promise((r) => setTimeout(r, 20))
        console.log(ids, uncaught > 0)
      })()`,
    ],
    { encoding: 'utf8', timeout: 20_000 },
  )
  assert.equal(r.status, 0, r.stderr)
  assert.deepEqual(r.stdout.trim().split(' '), ['2000', 'true'])
})

test('nextIdsAsync waits for a renewal that needs the event loop', async () => {
  // A grant of 30 ms and a JS source: a synchronous loop would exhaust the
  // grant while the loop cannot run the source; the async batch waits.
  const source = memoryAuthority()
  const gen = await Generator.start({
    grantSource: source,
    namespace: 'async-batch',
    grantDurationMs: 30,
    horizonMs: 30,
    layout: { timestampBits: 41, workerBits: 10, sequenceBits: 12 },
  })
  try {
    const all = []
    for (let round = 0; round < 5; round++) {
      const ids = await gen.nextIdsAsync(20000)
      assert.equal(ids.length, 20000)
      all.push(...ids)
    }
    const big = all.map(BigInt)
    for (let i = 1; i < big.length; i++) assert.ok(big[i] > big[i - 1])
    assert.ok(source.grants.length >= 2, `only ${source.grants.length} grants`)
    await assert.rejects(async () => gen.nextIdsAsync(-1), { code: 'INVALID_ARGUMENT' })
    assert.deepEqual(await gen.nextIdsAsync(0), [])
  } finally {
    gen.close()
  }
  assert.equal((await rejectionCode(gen.nextIdsAsync(1))).code, 'CLOSED')
})

test('nextIdsAsync gives up after timeoutMs with the last error', async () => {
  let calls = 0
  const inner = memoryAuthority()
  const gen = await Generator.start({
    grantSource: (request) => {
      calls++
      if (calls > 1) throw new Error('authority down')
      return inner(request)
    },
    namespace: 'async-timeout',
    grantDurationMs: 20,
    horizonMs: 20,
    backoffMinMs: 5,
    backoffMaxMs: 10,
  })
  try {
    await sleep(60)
    const t0 = Date.now()
    const { code } = await rejectionCode(gen.nextIdsAsync(10, 200))
    assert.ok(['UNAVAILABLE', 'GRANT_EXHAUSTED'].includes(code), code)
    assert.ok(Date.now() - t0 >= 150, 'gave up too early')
  } finally {
    gen.close()
  }
})
