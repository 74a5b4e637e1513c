'use strict'
// grantid/authorities on the throwaway PostgreSQL (node-postgres).

const test = require('node:test')
const assert = require('node:assert/strict')
const { Generator } = require('..')
const authorities = require('../authorities')

const pgUrl = process.env.GRANTID_TEST_POSTGRES_URL
const required = process.env.GRANTID_REQUIRE_SERVICES === '1'

test('postgres(pool) hands out distinct workers', { skip: !pgUrl && !required && 'GRANTID_TEST_POSTGRES_URL is not set' }, async () => {
  assert.ok(pgUrl, 'GRANTID_TEST_POSTGRES_URL must be set when GRANTID_REQUIRE_SERVICES=1')
  const { Pool } = require('pg')
  const pool = new Pool({ connectionString: pgUrl, max: 2 })
  const source = authorities.postgres(pool)
  const namespace = `node-helper-${process.pid}`
  const a = await Generator.start({ grantSource: source, namespace })
  const b = await Generator.start({ grantSource: source, namespace })
  try {
    assert.notEqual(a.stats().worker, b.stats().worker)
    const ids = [...a.nextIds(500), ...b.nextIds(500)]
    assert.equal(new Set(ids).size, ids.length)
    // The same table as the Rust adapter: a URL generator gets another worker.
    const c = await Generator.start({ grantSource: pgUrl, namespace })
    assert.ok(![a.stats().worker, b.stats().worker].includes(c.stats().worker))
    c.close()
  } finally {
    a.close()
    b.close()
    await pool.end()
  }
})

test('redis(client) runs the authority\'s Lua script and reads its answer', async () => {
  const fs = require('node:fs')
  const path = require('node:path')
  const lua = fs.readFileSync(path.join(__dirname, '..', '..', 'authority', 'lua', 'v1.lua'), 'utf8')
  const calls = []
  const client = {
    eval: async (script, options) => {
      calls.push({ script, options })
      return calls.length === 1 ? ['granted', 3, '7', '100', '200'] : ['lost', 'worker 3 is held']
    },
  }
  const source = authorities.redis(client)
  const request = {
    namespace: 'ns', incarnation: 2n ** 63n + 5n, requestId: 1, worker: null, notBefore: 0, now: 90,
    duration: 100, layout: { timestampBits: 41, workerBits: 10, sequenceBits: 12, epochMs: 1767225600000, tickMs: 1 },
  }
  const grant = await source(request)
  assert.deepEqual(grant, { namespace: 'ns', worker: 3, incarnation: request.incarnation, grantId: '7', start: 100, end: 200 })
  assert.equal(calls[0].script, lua)
  assert.deepEqual(calls[0].options.keys, ['grantid:{ns}'])
  assert.deepEqual(calls[0].options.arguments.slice(0, 4), ['acquire', '9223372036854775813', '1', ''])
  await assert.rejects(source({ ...request, worker: 3 }), { code: 'LEASE_LOST', message: 'worker 3 is held' })
})
