//! `sluice man`: the manual page, roff made by clap_mangen from the clap
//! definitions; `--dir DIR` writes one page per command.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, CommandFactory};

use super::version::BUILD_DATE;
use super::{to_stdout, Cli};

/// Arguments of `sluice man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write sluice.1 and one page per command (sluice-train.1, ...) into this
    /// directory instead of printing sluice.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Prints `sluice.1`, or writes every page into `--dir`.
pub fn run(args: &ManArgs) -> anyhow::Result<()> {
    let command = Cli::command().disable_help_subcommand(true);
    match &args.dir {
        None => {
            let mut roff = Vec::new();
            page(command).render(&mut roff)?;
            to_stdout(&roff)
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let mut command = command;
            command.build();
            write_pages(command, dir)
        }
    }
}

/// One page, dated with the build.
fn page(command: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(command).date(BUILD_DATE)
}

/// Writes the page of `command` and of each of its visible subcommands.
fn write_pages(command: clap::Command, dir: &Path) -> anyhow::Result<()> {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir)?;
    }
    let man = page(command);
    let path = dir.join(man.get_filename());
    let mut file = std::fs::File::create(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    man.render(&mut file)
        .with_context(|| format!("cannot write {}", path.display()))
}
