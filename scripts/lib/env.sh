# Shared environment for the scripts: sourced, never run.
# Makes sure cargo is on PATH (rustup installs it under ~/.cargo/bin).
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
