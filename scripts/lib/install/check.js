'use strict'
// Checks an installed grantid npm package, as a user's program would use it.
//
// Usage: node check.js STATE_FILE VECTORS_JSON COUNT PLATFORM_PACKAGE [ETCD_URL]
//
// The loader takes the addon from PLATFORM_PACKAGE (e.g. grantid-linux-x64-gnu);
// COUNT IDs from `file:STATE_FILE` (distinct and rising); every encode and
// decode of the conformance vectors; with ETCD_URL, 1,000 IDs from etcd too.
// Run by the package tier on the host's packages and by the platforms tier
// on each Linux platform package, in a Node of the package's own platform.
const assert = require('node:assert/strict')
const path = require('node:path')
const grantid = require('grantid')
// The binding's own test helpers, copied beside this file: the vectors'
// 64-bit numbers read as strings, as its conformance test reads them.
const { loadVectors } = require('./helpers.js')

const [state, vectorsPath, count, platformPackage, etcd] = process.argv.slice(2)
const loaded = Object.keys(require.cache).find((f) => f.endsWith('.node'))
assert.ok(loaded && loaded.includes(path.join('node_modules', platformPackage)), loaded)

;(async () => {
  const gen = await grantid.Generator.start({ grantSource: 'file:' + state, namespace: 'install-v1' })
  const ids = [gen.nextId(), gen.nextId(), ...gen.nextIds(Number(count) - 2)].map(BigInt)
  assert.equal(new Set(ids).size, ids.length)
  assert.equal(ids.length, Number(count))
  assert.ok(ids.every((id, i) => i === 0 || id > ids[i - 1]))
  assert.equal(typeof gen.nextIdBigInt(), 'bigint')
  assert.equal(gen.decode(String(ids[0])).worker, gen.stats().worker)
  gen.close()

  let checked = 0
  const vectors = loadVectors(vectorsPath)
  // The vectors name a layout's fields in snake case, the binding in camel case.
  const fields = ['timestamp_bits', 'worker_bits', 'sequence_bits', 'datacenter_bits', 'epoch_ms', 'tick_ms']
  const camel = (k) => k.replace(/_(.)/g, (_, c) => c.toUpperCase())
  for (const v of vectors.layouts) {
    const layout = Object.fromEntries(fields.map((k) => [camel(k), Number(v[k])]))
    for (const c of v.encode) {
      const [t, w, s] = [BigInt(c.timestamp), BigInt(c.worker), BigInt(c.sequence)]
      assert.equal(grantid.encode(t, w, s, layout), String(c.id))
      const d = grantid.decodeBigInt(String(c.id), layout)
      assert.deepEqual([d.timestamp, d.worker, d.sequence], [t, w, s])
      checked++
    }
  }
  assert.ok(checked > 0)

  // The store helpers run the authority's own script, from the addon.
  const scripts = []
  const redis = require('grantid/authorities').redis({
    eval: async (script) => {
      scripts.push(script)
      return ['granted', 0, '1', '100', '200']
    },
  })
  const request = {
    namespace: 'install-v1', incarnation: 5, requestId: 1, worker: null, notBefore: 0, now: 90, duration: 100,
    layout: { timestampBits: 41, workerBits: 10, sequenceBits: 12, epochMs: 1767225600000, tickMs: 1 },
  }
  assert.equal((await redis(request)).end, 200)
  assert.match(scripts[0], /grantid/)

  let fromEtcd = ''
  if (etcd) {
    const g = await grantid.Generator.start({ grantSource: etcd, namespace: 'install-etcd-v1' })
    assert.equal(new Set(g.nextIds(1000)).size, 1000)
    g.close()
    fromEtcd = `, 1000 IDs from ${etcd}`
  }
  console.log(
    `node: ok on ${process.arch} (Node ${process.version}): ${ids.length} IDs, ` +
      `${checked} conformance vectors, the Redis helper's script, addon ${path.basename(loaded)}${fromEtcd}`,
  )
})().catch((e) => {
  console.error(e)
  process.exit(1)
})
