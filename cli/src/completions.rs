//! `grantid completions SHELL`: a completion script from the command's own
//! definition (clap_complete).

use std::io::Write;

use clap::Args;
use clap_complete::Shell;

use crate::exit::Failure;
use crate::output;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

/// The script for `command`, the whole command line's definition.
pub fn run(a: CompletionsArgs, mut command: clap::Command) -> Result<(), Failure> {
    // clap_complete panics when its writer fails; render into memory and
    // write here, so a closed pipe ends quietly like every other command.
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut command, "grantid", &mut script);
    let mut out = output::stdout();
    out.write_all(&script)?;
    out.flush()?;
    Ok(())
}
