'use strict'
// The generators bench.js measures: grantid's calls and the peers, each a
// function making one ID (or a batch, with `perCall` IDs).

const crypto = require('node:crypto')

/** Requires a peer package, or returns the reason it is missing. */
function peer(name) {
  try {
    return { mod: require(name) }
  } catch (e) {
    return { missing: e.code || String(e) }
  }
}

/** A fresh instance of every peer, or `missing` when not installed. */
function peerGenerators() {
  const sapphire = peer('@sapphire/snowflake')
  const nodejsSnowflake = peer('nodejs-snowflake')
  const snowyflake = peer('snowyflake')
  const epoch = 1767225600000n
  return [
    { name: 'crypto.randomUUID()', returns: 'string', make: () => crypto.randomUUID },
    {
      name: '@sapphire/snowflake generate()',
      returns: 'bigint',
      missing: sapphire.missing,
      make: () => {
        const s = new sapphire.mod.Snowflake(epoch)
        return () => s.generate()
      },
    },
    {
      name: 'nodejs-snowflake getUniqueID()',
      returns: 'bigint',
      missing: nodejsSnowflake.missing,
      make: () => {
        const s = new nodejsSnowflake.mod.Snowflake({ custom_epoch: Number(epoch), instance_id: 1 })
        return () => s.getUniqueID()
      },
    },
    {
      name: 'snowyflake nextId()',
      returns: 'bigint',
      missing: snowyflake.missing,
      make: () => {
        const s = new snowyflake.mod.Snowyflake({ epoch, workerId: 1n, processId: 1n })
        return () => s.nextId()
      },
    },
  ]
}

/** Timed candidates: grantid on `gen`, then the peers. */
function candidates(gen) {
  const list = [
    { name: 'grantid nextId', returns: 'string', perCall: 1, fn: () => gen.nextId() },
    { name: 'grantid nextIdBigInt', returns: 'bigint', perCall: 1, fn: () => gen.nextIdBigInt() },
    { name: 'grantid nextIds(1000), per ID', returns: 'string[]', perCall: 1000, fn: () => gen.nextIds(1000) },
    // What a napi-rs class method costs: a getter reading one flag.
    { name: 'napi-rs class getter (gen.closed)', returns: 'boolean', perCall: 1, fn: () => gen.closed },
  ]
  for (const p of peerGenerators()) {
    list.push({ ...p, peer: true, perCall: 1, fn: p.missing ? null : p.make() })
  }
  return list
}

/** One generator function per entry for the duplicate loops. */
function duplicateLoops(gen) {
  return [
    { name: 'grantid nextId (default layout)', grantid: true, fn: () => gen.nextId() },
    ...peerGenerators().map((p) => ({ name: p.name, missing: p.missing, fn: p.missing ? null : p.make() })),
  ]
}

module.exports = { candidates, duplicateLoops }
