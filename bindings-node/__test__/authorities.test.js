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

const request = {
  namespace: 'ns', incarnation: 2n ** 63n + 5n, requestId: 1, worker: null, notBefore: 0, now: 90,
  duration: 100, layout: { timestampBits: 41, workerBits: 10, sequenceBits: 12, epochMs: 1767225600000, tickMs: 1 },
}

const pgSkip = { skip: !pgUrl && !required && 'GRANTID_TEST_POSTGRES_URL is not set' }

// Runs `body(pool)` on a PostgreSQL database of its own, dropped after.
async function withScratchDatabase (body) {
  assert.ok(pgUrl, 'GRANTID_TEST_POSTGRES_URL must be set when GRANTID_REQUIRE_SERVICES=1')
  const { Client, Pool } = require('pg')
  const name = `grantid_node_${process.pid}_${Date.now()}`
  const admin = new Client({ connectionString: pgUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  const url = new URL(pgUrl)
  url.pathname = `/${name}`
  const pool = new Pool({ connectionString: url.toString(), max: 2 })
  // The DROP below ends the database's connections, a closing one among
  // them ("terminating connection due to administrator command"): the
  // pool reports it as an 'error' event, which is expected here.
  pool.on('error', (e) => assert.equal(e.code, '57P01', e.message))
  try {
    await body(pool)
  } finally {
    await pool.end()
    await admin.query(`DROP DATABASE ${name} WITH (FORCE)`)
    await admin.end()
  }
}

test('postgres(pool) applies the schema again over an older version', pgSkip, () => withScratchDatabase(async (pool) => {
  const newest = 'SELECT max(version) AS v FROM grantid.schema_version'
  const version = require('..').postgresSchemaVersion()
  // A database of an older schema version (its functions in place). The
  // calls' answers do not matter here (a new store is quarantined): the
  // schema is applied before the call.
  await authorities.postgres(pool)(request).catch(() => {})
  await pool.query('DELETE FROM grantid.schema_version WHERE version >= $1', [version])
  assert.ok((await pool.query(newest)).rows[0].v < version)
  await authorities.postgres(pool)({ ...request, namespace: 'again' }).catch(() => {})
  assert.equal((await pool.query(newest)).rows[0].v, version)
}))

test('postgres(pool) puts back the function its call names when it is missing', pgSkip, () => withScratchDatabase(async (pool) => {
  const native = require('..')
  await pool.query(native.postgresSchemaScript())
  await pool.query('SELECT grantid.declare_new_deployment()')
  const arity = native.postgresAcquireCall(request).values.length
  const { rows } = await pool.query(
    "SELECT pg_get_function_identity_arguments(p.oid) AS args FROM pg_proc p WHERE p.pronamespace = 'grantid'::regnamespace AND p.proname = 'acquire' AND p.pronargs = $1",
    [arity])
  await pool.query(`DROP FUNCTION grantid.acquire(${rows[0].args})`)
  const grant = await authorities.postgres(pool)(request)
  assert.equal(typeof grant.worker, 'number')
}))

test('postgres(pool, options) gives the database maxLeadMs and clockSkewMs', pgSkip, () => withScratchDatabase(async (pool) => {
  // The answer does not matter (a new store is quarantined): the namespace
  // records the caller's lead and skew before anything is granted.
  await authorities.postgres(pool, { maxLeadMs: 8000, clockSkewMs: 1500 })(request).catch(() => {})
  const { rows } = await pool.query('SELECT max_lead_ms, clock_skew_ms FROM grantid.namespaces WHERE namespace = $1', [request.namespace])
  assert.deepEqual(rows, [{ max_lead_ms: '8000', clock_skew_ms: '1500' }])
  await assert.rejects(authorities.postgres(pool, { maxLeadMs: 0 })(request), /maxLeadMs must be at least 1/)
}))

test('redis(client) runs the authority\'s Lua script with the Rust adapter\'s keys and arguments', async () => {
  const fs = require('node:fs')
  const path = require('node:path')
  const lua = fs.readFileSync(path.join(__dirname, '..', '..', 'authority', 'src', 'engines', 'redis', 'v1.lua'), 'utf8')
  const calls = []
  const client = {
    eval: async (script, options) => {
      calls.push({ script, options })
      return ['granted', 3, '7', '100', '200']
    },
  }
  const source = authorities.redis(client, { maxLeadMs: 9000 })
  const grant = await source(request)
  assert.deepEqual(grant, { namespace: 'ns', worker: 3, incarnation: String(request.incarnation), grantId: '7', start: 100, end: 200 })
  assert.equal(calls[0].script, lua)
  assert.deepEqual(calls[0].options.keys, ['grantid:{ns}', 'grantid:store'])
  assert.deepEqual(calls[0].options.arguments.slice(0, 4), ['acquire', '9223372036854775813', '1', ''])
  assert.equal(calls[0].options.arguments.length, 18)
  assert.equal(calls[0].options.arguments[15], '9000')
})

// Every answer kind of the store, through the helpers, gets the error the
// Rust adapters give it (authority/src/answer.rs): lost is LEASE_LOST, wait
// is UNAVAILABLE (retried), refused is INVALID_ARGUMENT (start-up fails),
// anything malformed is an invalid grant.
const kinds = [
  { status: 'lost', code: 'LEASE_LOST', grantError: 'lost' },
  { status: 'wait', code: 'UNAVAILABLE', grantError: 'unavailable' },
  { status: 'refused', code: 'INVALID_ARGUMENT', grantError: 'refused' },
  { status: 'maybe', code: 'UNAVAILABLE', grantError: 'invalid' },
]

test('every Redis answer kind has the error kind it has in Rust', async () => {
  for (const k of kinds) {
    const source = authorities.redis({ eval: async () => [k.status, 'why'] })
    await assert.rejects(source(request), (e) => {
      assert.equal(e.code, k.code, k.status)
      assert.equal(e.grantError, k.grantError, k.status)
      return true
    })
  }
  const short = authorities.redis({ eval: async () => ['granted', 3] })
  await assert.rejects(short(request), { grantError: 'invalid' })
  // A grant that starts before the request's notBefore.
  const early = authorities.redis({ eval: async () => ['granted', 3, '7', '0', '200'] })
  await assert.rejects(early({ ...request, notBefore: 50 }), { grantError: 'invalid' })
})

test('every PostgreSQL answer kind has the error kind it has in Rust', async () => {
  const pool = (row) => ({
    query: async (text) => (text.includes('to_regprocedure') ? { rows: [{ f: 'grantid.acquire' }] } : { rows: [row] }),
  })
  for (const k of kinds) {
    const source = authorities.postgres(pool({ status: k.status, worker: null, grant_id: null, start_tick: null, end_tick: null, message: 'why' }))
    await assert.rejects(source(request), { code: k.code, grantError: k.grantError })
  }
  const granted = authorities.postgres(pool({ status: 'granted', worker: '3', grant_id: '7', start_tick: '100', end_tick: '200', message: null }))
  assert.deepEqual(await granted(request), { namespace: 'ns', worker: 3, incarnation: String(request.incarnation), grantId: '7', start: 100, end: 200 })
  const missing = authorities.postgres(pool(undefined))
  await assert.rejects(missing(request), { grantError: 'invalid' })
})

test('a generator on a helper that answers wait keeps retrying, and one that answers refused fails at start', async () => {
  const waiting = authorities.redis({ eval: async () => ['wait', 'would end more than max_lead_ms after the authority clock'] })
  await assert.rejects(Generator.start({ grantSource: waiting, namespace: 'ns-wait', startupTimeoutMs: 300 }), (e) => {
    assert.equal(e.code, 'UNAVAILABLE', e.message)
    return true
  })
  const refused = authorities.redis({ eval: async () => ['refused', 'namespace is registered with another layout'] })
  const t0 = Date.now()
  await assert.rejects(Generator.start({ grantSource: refused, namespace: 'ns-refused', startupTimeoutMs: 5000 }), (e) => {
    assert.equal(e.code, 'INVALID_ARGUMENT', e.message)
    assert.match(e.message, /another layout/)
    return true
  })
  assert.ok(Date.now() - t0 < 4000, 'a refusal fails start-up at once')
})
