'use strict'
// Grant sources over connections the application already keeps:
//   postgres(pool)  node-postgres Pool or Client: calls grantid.acquire, the
//                   SQL function of authority/sql/v1.sql
//   redis(client)   node-redis (v4+) client: runs authority/lua/v1.lua
// Both apply the one allocation rule of the reference authorities; the SQL
// and Lua text is the authority's own, copied into the package when it is
// packed (from ../authority in a source checkout).

const fs = require('node:fs')
const path = require('node:path')

/** Lease grace and Redis log length: the reference authorities' defaults. */
const DEFAULT_LEASE_GRACE_MS = 5000
const DEFAULT_REDIS_LOG_MAX = 1000000

function authorityFile(relative) {
  for (const base of [path.join(__dirname, 'authority'), path.join(__dirname, '..', 'authority')]) {
    const file = path.join(base, relative)
    if (fs.existsSync(file)) return fs.readFileSync(file, 'utf8')
  }
  throw new Error(`grantid: ${relative} is missing from the package (authority/ was not copied at pack time)`)
}

const lost = (message) => Object.assign(new Error(message), { code: 'LEASE_LOST' })
const asInt64 = (v) => BigInt.asIntN(64, BigInt(v)).toString()

/**
 * A grant source on PostgreSQL through node-postgres. The schema is applied
 * once, on first use (idempotent, under the same advisory lock as the Rust
 * adapter).
 */
function postgres(pool, { leaseGraceMs = DEFAULT_LEASE_GRACE_MS } = {}) {
  let ready
  const ensureSchema = () => {
    ready ??= (async () => {
      const have = await pool.query("SELECT to_regprocedure('grantid.acquire(text,bigint,bigint,bigint,bigint,bigint,integer,integer,integer,bigint,bigint,bigint,bigint)') AS f")
      if (have.rows[0].f) return
      await pool.query(`BEGIN; SELECT pg_advisory_xact_lock(hashtext('grantid schema')); ${authorityFile('sql/v1.sql')}; COMMIT;`)
    })().catch((e) => {
      ready = undefined
      throw e
    })
    return ready
  }
  return async (request) => {
    await ensureSchema()
    const l = request.layout
    const grace = Math.ceil(leaseGraceMs / l.tickMs)
    const { rows } = await pool.query(
      'SELECT status, worker, grant_id, start_tick, end_tick, message FROM grantid.acquire($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)',
      [
        request.namespace,
        asInt64(request.incarnation),
        asInt64(request.requestId),
        request.worker,
        request.notBefore,
        request.duration,
        l.timestampBits,
        l.workerBits,
        l.sequenceBits,
        l.epochMs,
        l.tickMs,
        grace,
      ],
    )
    const row = rows[0]
    if (row.status !== 'granted') throw lost(row.message ?? row.status)
    return {
      namespace: request.namespace,
      worker: Number(row.worker),
      incarnation: request.incarnation,
      grantId: String(row.grant_id),
      start: Number(row.start_tick),
      end: Number(row.end_tick),
    }
  }
}

/** A grant source on Redis through a node-redis (v4+) client. */
function redis(client, { leaseGraceMs = DEFAULT_LEASE_GRACE_MS, logMax = DEFAULT_REDIS_LOG_MAX } = {}) {
  const script = authorityFile('lua/v1.lua')
  return async (request) => {
    const l = request.layout
    const answer = await client.eval(script, {
      keys: [`grantid:{${request.namespace}}`],
      arguments: [
        'acquire',
        String(request.incarnation),
        String(request.requestId),
        request.worker === null ? '' : String(request.worker),
        String(request.notBefore),
        String(request.duration),
        String(l.timestampBits),
        String(l.workerBits),
        String(l.sequenceBits),
        String(l.epochMs),
        String(l.tickMs),
        String(Math.ceil(leaseGraceMs / l.tickMs)),
        '',
        String(logMax),
      ],
    })
    if (answer[0] !== 'granted') throw lost(String(answer[1]))
    return {
      namespace: request.namespace,
      worker: Number(answer[1]),
      incarnation: request.incarnation,
      grantId: String(answer[2]),
      start: Number(answer[3]),
      end: Number(answer[4]),
    }
  }
}

module.exports = { postgres, redis }
