// Copies the authority's SQL and Lua (../authority/{sql,lua}) into the
// package before `npm pack`, so `grantid/authorities` runs the very same
// allocation rule as the Rust adapters.
const fs = require('node:fs')
const path = require('node:path')

const from = path.join(__dirname, '..', '..', 'authority')
const to = path.join(__dirname, '..', 'authority')
for (const dir of ['sql', 'lua']) {
  fs.rmSync(path.join(to, dir), { recursive: true, force: true })
  fs.cpSync(path.join(from, dir), path.join(to, dir), { recursive: true })
}
