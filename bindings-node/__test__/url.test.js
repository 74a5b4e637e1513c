'use strict'
// Authority URLs: the file authority (also shared by worker_threads) and
// the throwaway PostgreSQL named by GRANTID_TEST_POSTGRES_URL.

const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { Worker } = require('node:worker_threads')
const { Generator } = require('..')
const { less } = require('./helpers')

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'grantid-node-'))
test.after(() => fs.rmSync(tmp, { recursive: true, force: true }))

test('a file authority URL', async () => {
  const url = `file:${path.join(tmp, 'one.json')}`
  const a = await Generator.start({ grantSource: url, namespace: 'file-v1' })
  const b = await Generator.start({ grantSource: url, namespace: 'file-v1' })
  try {
    const ids = a.nextIds(1000)
    for (let i = 1; i < ids.length; i++) assert.ok(less(ids[i - 1], ids[i]))
    assert.notEqual(a.stats().worker, b.stats().worker)
    assert.notEqual(a.decode(a.nextId()).worker, b.decode(b.nextId()).worker)
  } finally {
    a.close()
    b.close()
  }
})

test('worker_threads sharing a file authority get distinct workers', async () => {
  const url = `file:${path.join(tmp, 'threads.json')}`
  const n = 4
  const script = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { Generator } = require(workerData.pkg)
    Generator.start({ grantSource: workerData.url, namespace: 'threads-v1' }).then((gen) => {
      const ids = gen.nextIds(2000)
      parentPort.postMessage({ worker: gen.stats().worker, ids })
      // Keep the worker until the parent has every answer.
      parentPort.once('message', () => { gen.close(); parentPort.close() })
    }, (e) => parentPort.postMessage({ error: e.code + ' ' + e.message }))
  `
  const workers = Array.from(
    { length: n },
    () => new Worker(script, { eval: true, workerData: { url, pkg: path.join(__dirname, '..') } }),
  )
  const answers = await Promise.all(
    workers.map((w) => new Promise((resolve, reject) => {
      w.once('message', resolve)
      w.once('error', reject)
    })),
  )
  for (const w of workers) w.postMessage('done')
  await Promise.all(workers.map((w) => new Promise((resolve) => w.once('exit', resolve))))
  for (const a of answers) assert.equal(a.error, undefined, a.error)
  assert.equal(new Set(answers.map((a) => a.worker)).size, n)
  const all = answers.flatMap((a) => a.ids)
  assert.equal(new Set(all).size, all.length)
})

const pgUrl = process.env.GRANTID_TEST_POSTGRES_URL
const required = process.env.GRANTID_REQUIRE_SERVICES === '1'
test('a PostgreSQL authority URL', { skip: !pgUrl && !required && 'GRANTID_TEST_POSTGRES_URL is not set' }, async () => {
  assert.ok(pgUrl, 'GRANTID_TEST_POSTGRES_URL must be set when GRANTID_REQUIRE_SERVICES=1')
  const a = await Generator.start({ grantSource: pgUrl, namespace: `node-pg-${process.pid}` })
  const b = await Generator.start({ grantSource: pgUrl, namespace: `node-pg-${process.pid}` })
  try {
    assert.notEqual(a.stats().worker, b.stats().worker)
    const ids = [...a.nextIds(500), ...b.nextIds(500)]
    assert.equal(new Set(ids).size, ids.length)
  } finally {
    a.close()
    b.close()
  }
})

// dynamodb:// from Node: a table of the test's own on the throwaway
// DynamoDB (moto), made and declared new by the command.
const ddbUrl = process.env.GRANTID_TEST_DYNAMODB_URL
test('a dynamodb URL gives two generators two workers', { skip: !ddbUrl && process.env.GRANTID_REQUIRE_SERVICES !== '1' && 'GRANTID_TEST_DYNAMODB_URL is not set' }, async () => {
  assert.ok(ddbUrl, 'GRANTID_TEST_DYNAMODB_URL must be set when GRANTID_REQUIRE_SERVICES=1')
  const url = ddbUrl.replace('grantid_test', `grantid_node_${process.pid}`)
  const bin = process.env.GRANTID_BIN || path.join(__dirname, '..', '..', 'target', 'debug', 'grantid')
  require('node:child_process').execFileSync(bin, ['authority', 'init', '--new-deployment', url])
  const a = await Generator.start({ grantSource: url, namespace: 'ddb-v1' })
  const b = await Generator.start({ grantSource: url, namespace: 'ddb-v1' })
  try {
    assert.notEqual(a.stats().worker, b.stats().worker)
    const ids = [...a.nextIds(1000), ...b.nextIds(1000)]
    assert.equal(new Set(ids).size, 2000)
  } finally {
    a.close()
    b.close()
  }
})
