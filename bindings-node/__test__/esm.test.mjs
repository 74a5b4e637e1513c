// The ESM entry exposes the same binding as the CommonJS one.
import test from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import grantid, { Generator, PublicIds, decode, errorCodes } from 'grantid'

const require = createRequire(import.meta.url)

test('ESM and CommonJS entries are the same binding', () => {
  const cjs = require('grantid')
  assert.equal(Generator, cjs.Generator)
  assert.equal(PublicIds, cjs.PublicIds)
  assert.equal(grantid.decode, decode)
  assert.equal(errorCodes().length, 8)
})
