'use strict'
// Shared test helpers: an in-process grant authority written in JS (the
// allocation rule of docs/DESIGN.md section 2, for tests only) and small waits.

const fs = require('node:fs')
const path = require('node:path')

/**
 * A JS grant source keeping a high-water mark per worker. Retries of the same
 * (incarnation, requestId) get the recorded answer. `grants` lists every
 * grant made.
 */
function memoryAuthority({ workers = 1024 } = {}) {
  const highWater = new Map()
  const holders = new Map()
  const answers = new Map()
  let fencing = 0
  const source = (request) => {
    const key = `${request.incarnation}/${request.requestId}`
    if (answers.has(key)) return answers.get(key)
    const me = String(request.incarnation)
    let worker = request.worker
    if (worker === null) {
      worker = 0
      while (holders.has(worker) && holders.get(worker) !== me) worker++
      if (worker >= workers) {
        throw Object.assign(new Error('no free worker'), { code: 'LEASE_LOST' })
      }
    }
    holders.set(worker, me)
    const start = Math.max(highWater.get(worker) ?? 0, request.now, request.notBefore)
    const end = start + request.duration
    highWater.set(worker, end)
    const grant = {
      namespace: request.namespace,
      worker,
      incarnation: request.incarnation,
      grantId: ++fencing,
      start,
      end,
    }
    answers.set(key, grant)
    source.grants.push(grant)
    return grant
  }
  source.grants = []
  return source
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** Runs `fn`, expecting it to throw an Error with `code`; returns it. */
function codeOf(fn) {
  try {
    fn()
  } catch (e) {
    if (!(e instanceof Error)) throw new Error(`thrown value is not an Error: ${e}`)
    return e.code
  }
  return 'NO_ERROR'
}

async function rejectionCode(promise) {
  try {
    const value = await promise
    if (value && typeof value.close === 'function') value.close()
  } catch (e) {
    if (!(e instanceof Error)) throw new Error(`rejection is not an Error: ${e}`)
    return e
  }
  return { code: 'NO_ERROR', message: '' }
}

/**
 * The conformance vectors, with every integer of 16 digits or more kept
 * exact as a string (JSON.parse would round it to a double).
 */
function loadVectors(file = path.join(__dirname, '..', '..', 'conformance', 'vectors.json')) {
  const text = fs.readFileSync(file, 'utf8')
  return JSON.parse(text.replace(/([:[,]\s*)(-?\d{16,})(?=\s*[,}\]])/g, '$1"$2"'))
}

/** Numeric order of two decimal ID strings without converting them. */
function less(a, b) {
  return a.length < b.length || (a.length === b.length && a < b)
}

module.exports = { memoryAuthority, sleep, codeOf, rejectionCode, loadVectors, less }
