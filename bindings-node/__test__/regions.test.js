'use strict'
// Regions (docs/AUTHORITIES.md): a layout's datacenter bits, the
// generator's `datacenter` option and an authority URL's `datacenter=N`.

const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const grantid = require('..')
const { codeOf } = require('./helpers')

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'grantid-node-regions-'))
test.after(() => fs.rmSync(tmp, { recursive: true, force: true }))

const layout = { timestampBits: 41, workerBits: 10, sequenceBits: 12, datacenterBits: 5 }

test('decode reports the datacenter and the worker within it', () => {
  assert.equal(grantid.layout(layout).datacenterBits, 5)
  const id = grantid.encode(1000, 17 * 32 + 3, 9, layout)
  const d = grantid.decode(id, layout)
  assert.deepEqual([d.worker, d.datacenter, d.datacenterWorker], [547, 17, 3])
  assert.equal(grantid.decodeBigInt(id, layout).datacenter, 17n)
  const flat = grantid.decode(id)
  assert.deepEqual([flat.datacenter, flat.datacenterWorker], [0, 547])
  assert.equal(codeOf(() => grantid.layout({ ...layout, datacenterBits: 11 })), 'INVALID_ARGUMENT')
})

test('a generator issues in its datacenter; a disagreeing URL is refused', async () => {
  const url = `file:${path.join(tmp, 'regions.json')}?datacenter=2`
  const gen = await grantid.Generator.start({ grantSource: url, namespace: 'regions-v1', layout, datacenter: 2 })
  try {
    assert.equal(gen.datacenter, 2)
    for (const id of gen.nextIds(100)) assert.equal(gen.decode(id).datacenter, 2)
  } finally {
    gen.close()
  }
  await assert.rejects(
    grantid.Generator.start({ grantSource: url, namespace: 'regions-v1', layout, datacenter: 1 }),
    (e) => e.code === 'INVALID_ARGUMENT' && /authority grants the workers of datacenter 2/.test(e.message),
  )
})
