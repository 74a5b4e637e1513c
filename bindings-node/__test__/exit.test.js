'use strict'
// The addon keeps the process alive only while needed: a script whose only
// pending work is an open generator exits; so does one that closed it.

const test = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const path = require('node:path')

const pkg = JSON.stringify(path.join(__dirname, '..'))
const run = (body) =>
  spawnSync(process.execPath, ['-e', `const { Generator } = require(${pkg});\n${body}`], {
    encoding: 'utf8',
    timeout: 20_000,
  })

for (const [name, close] of [
  ['an open generator', ''],
  ['a closed generator', 'gen.close()'],
]) {
  test(`a script with ${name} and nothing else to do exits`, () => {
    const t0 = Date.now()
    const r = run(`
      const source = (q) => ({ namespace: q.namespace, worker: 1, incarnation: q.incarnation,
        grantId: q.requestId, start: Math.max(q.now, q.notBefore), end: Math.max(q.now, q.notBefore) + q.duration })
      Generator.start({ grantSource: source, namespace: 'exit-v1' }).then((gen) => {
        console.log(gen.nextId()); ${close}
      })`)
    assert.equal(r.error, undefined, 'the script did not exit by itself')
    assert.equal(r.status, 0, r.stderr)
    assert.match(r.stdout, /^\d+\n$/)
    assert.ok(Date.now() - t0 < 15_000)
  })
}
