# What the install checks share (sourced by scripts/package.d/10-install.sh
# and scripts/platforms.d/): a PATH without Rust, and the checks every
# artifact passes.
# A PATH with the system's tools and nothing of Rust (no ~/.cargo/bin).
plain_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
plain_path=$(echo "$plain_path" | tr : '\n' | while read -r d; do
  [ -e "$d/cargo" ] || [ -e "$d/rustc" ] || echo "$d"; done | paste -sd:)
no_debug_info() {
  if readelf -S "$1" | grep -q '\.debug_info'; then
    echo "$1 carries debug info" >&2
    return 1
  fi
}
has_licences() { # $1: a listing of an archive
  for f in LICENSE-MIT LICENSE-APACHE; do
    grep -q "$f\$" <<<"$1" || { echo "$f missing from $2" >&2; return 1; }
  done
}

