'use strict'
// Grant sources over connections the application already keeps:
//   postgres(pool)  node-postgres Pool or Client: calls grantid.acquire, the
//                   SQL function of the authority's PostgreSQL engine
//   redis(client)   node-redis (v4+) client: runs the Redis engine's script
// Both apply the one allocation rule of the reference authorities; the SQL
// and Lua text is the authority's own, built into the addon
// (`postgresSchemaSql`, `redisScript`), and the calls and the reading of the
// answers are the Rust adapters' own (src/protocol.rs), so every answer has
// the error code it has in Rust: 'LEASE_LOST' for lost, 'UNAVAILABLE' for
// wait (retried), 'INVALID_ARGUMENT' for refused, with `grantError` naming
// the answer.

const native = require('./index.js')

/**
 * A grant source on PostgreSQL through node-postgres. The schema is applied
 * once, on first use, when the Rust adapter's checks
 * (`postgresSchemaChecks()`) say it is missing or older, as the adapter
 * applies it (`postgresSchemaScript()`: idempotent, under its advisory
 * lock). `options` are the URL options `leaseGraceMs`, `maxLeadMs`,
 * `clockSkewMs`. The statement and the reading of its row are the Rust
 * adapter's own (`postgresAcquireCall`, `grantFromPostgresRow`).
 */
function postgres(pool, options = {}) {
  let ready
  const ensureSchema = () => {
    ready ??= (async () => {
      for (const check of native.postgresSchemaChecks()) {
        const { rows } = await pool.query(check)
        if (!rows[0]) {
          await pool.query(native.postgresSchemaScript())
          return
        }
      }
    })().catch((e) => {
      ready = undefined
      throw e
    })
    return ready
  }
  return async (request) => {
    const call = native.postgresAcquireCall(request, options)
    await ensureSchema()
    let result
    try {
      result = await pool.query(call.text, call.values)
    } catch (e) {
      // SQLSTATE undefined_function: the schema's version row is current but
      // the function the call names is missing; the script puts it back.
      if (e.code !== '42883') throw e
      await pool.query(native.postgresSchemaScript())
      result = await pool.query(call.text, call.values)
    }
    return native.grantFromPostgresRow(request, result.rows[0])
  }
}

/**
 * A grant source on Redis through a node-redis (v4+) client: the script's
 * keys and arguments and the reading of its reply are the Rust adapter's
 * own (`redisAcquireCall`, `grantFromRedisReply`).
 */
function redis(client, options = {}) {
  const script = native.redisScript()
  return async (request) => {
    const call = native.redisAcquireCall(request, options)
    const reply = await client.eval(script, call)
    return native.grantFromRedisReply(request, reply)
  }
}

module.exports = { postgres, redis }
