'use strict'
// PublicIds: the shared vectors (conformance/public_ids.json), keys, refusals
// with INVALID_ARGUMENT, and properties on random samples.

const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const util = require('node:util')
const { PublicIds } = require('..')
const { codeOf } = require('./helpers')

// Every number of 16 digits or more in this file is a string already.
const pv = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'conformance', 'public_ids.json'), 'utf8'))
const LIMIT = 1n << 63n
const PAPER_KEY = '1b1a1918131211100b0a090803020100'

test('raw cipher vectors, with hex and byte keys', () => {
  assert.equal(pv.cipher[0].key, PAPER_KEY)
  for (const v of pv.cipher) {
    for (const ids of [new PublicIds(v.key), new PublicIds(Buffer.from(v.key, 'hex')), new PublicIds(new Uint8Array(Buffer.from(v.key, 'hex')))]) {
      assert.equal(ids.cipherEncrypt(BigInt('0x' + v.plaintext)), BigInt('0x' + v.ciphertext))
      assert.equal(ids.cipherDecrypt(BigInt('0x' + v.ciphertext)), BigInt('0x' + v.plaintext))
    }
  }
})

test('permutation vectors, strings and bigints in and out', () => {
  let maxWalks = 0
  const seen = new Set()
  for (const ns of pv.namespaces) {
    const ids = new PublicIds(ns.key)
    for (const v of ns.vectors) {
      assert.equal(ids.encode(v.id), v.public)
      assert.equal(ids.encodeBigInt(BigInt(v.id)), BigInt(v.public))
      assert.equal(ids.decode(v.public), v.id)
      assert.equal(ids.decodeBigInt(BigInt(v.public)), BigInt(v.id))
      assert.equal(ids.encodeStr(v.id), v.text)
      assert.equal(ids.encodeStr(BigInt(v.id)), v.text)
      assert.equal(ids.decodeStr(v.text), v.id)
      assert.equal(ids.decodeStrBigInt(v.text.toUpperCase()), BigInt(v.id))
      maxWalks = Math.max(maxWalks, v.walks)
      seen.add(v.id)
    }
  }
  assert.ok(maxWalks >= 7)
  assert.ok(seen.has('1') && seen.has((LIMIT - 1n).toString()))
})

test('text forms and refusals', () => {
  const ids = new PublicIds(pv.namespaces[0].key)
  for (const v of [...pv.text, ...pv.text_valid]) {
    assert.equal(ids.decodeStr(v.text), ids.decode(v.public))
  }
  for (const t of pv.text_invalid) {
    assert.equal(codeOf(() => ids.decodeStr(t)), 'INVALID_ARGUMENT', JSON.stringify(t))
  }
  for (const bad of pv.id_invalid) {
    for (const call of ['encode', 'decode', 'encodeStr', 'encodeBigInt', 'decodeBigInt']) {
      assert.equal(codeOf(() => ids[call](bad)), 'INVALID_ARGUMENT', `${call}(${bad})`)
      assert.equal(codeOf(() => ids[call](BigInt(bad))), 'INVALID_ARGUMENT', `${call}(${bad}n)`)
    }
  }
  // Never a number: IDs pass 2^53.
  assert.equal(codeOf(() => ids.encode(1)), 'INVALID_ARGUMENT')
  assert.equal(codeOf(() => ids.decodeStr(1)), 'INVALID_ARGUMENT')
  assert.equal(codeOf(() => ids.encode(-1n)), 'INVALID_ARGUMENT')
  for (const k of pv.key_valid) {
    assert.equal(new PublicIds(k.hex).encode('77'), new PublicIds(k.same_as).encode('77'))
  }
  for (const k of pv.key_invalid_hex) {
    let message = ''
    assert.equal(codeOf(() => { try { new PublicIds(k) } catch (e) { message = e.message; throw e } }), 'INVALID_ARGUMENT')
    if (k.length >= 12) assert.ok(!message.includes(k.slice(0, 12)), message)
  }
  for (const n of pv.key_invalid_lengths) {
    assert.equal(codeOf(() => new PublicIds(Buffer.alloc(n))), 'INVALID_ARGUMENT')
  }
  for (const k of [undefined, null, 5, 5n, [1, 2], {}]) {
    assert.equal(codeOf(() => new PublicIds(k)), 'INVALID_ARGUMENT', String(k))
  }
})

test('the key is never shown', () => {
  const key = Buffer.from(PAPER_KEY, 'hex')
  const ids = new PublicIds(key)
  const shown = util.inspect(ids, { showHidden: true, depth: 5 }) + String(ids) + JSON.stringify(ids)
  assert.ok(String(ids).includes('redacted'))
  assert.ok(!shown.includes('1b1a19') && !shown.includes('27, 26'), shown)
})

test('properties on random samples', () => {
  const a = new PublicIds(PublicIds.generateKey())
  const b = new PublicIds(PublicIds.generateKey())
  const outputs = new Set()
  const inputs = new Set()
  for (let i = 0; i < 20000; i++) {
    const id = (BigInt.asUintN(63, BigInt(Math.floor(Math.random() * 2 ** 53)) * 1048573n + BigInt(i)) || 1n)
    inputs.add(id)
    const p = a.encodeBigInt(id)
    assert.ok(p >= 1n && p < LIMIT)
    assert.equal(a.decodeBigInt(p), id)
    outputs.add(p)
    const text = a.encodeStr(id)
    assert.equal(text.length, 13)
    assert.equal(a.decodeStrBigInt(text), id)
  }
  assert.equal(outputs.size, inputs.size)
  let same = 0
  for (let id = 1n; id <= 2000n; id++) same += a.encode(id) === b.encode(id) ? 1 : 0
  assert.equal(same, 0)
})
