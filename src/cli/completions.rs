//! `sluice completions SHELL`: a completion script for the shell, made from
//! the same clap definitions as the commands themselves.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::{to_stdout, usage, Cli};

/// The shells `sluice completions` writes for, as users name them.
pub const SHELLS: [(&str, Shell); 4] = [
    ("bash", Shell::Bash),
    ("zsh", Shell::Zsh),
    ("fish", Shell::Fish),
    ("powershell", Shell::PowerShell),
];

/// Arguments of `sluice completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell whose script to print.
    #[arg(value_name = "SHELL", value_parser = ShellName)]
    pub shell: String,
}

/// Takes any word as the shell, so that an unknown one is refused by [`run`]
/// in one line, while naming the shells for help and completion scripts.
#[derive(Debug, Clone, Copy)]
struct ShellName;

impl clap::builder::TypedValueParser for ShellName {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            SHELLS
                .iter()
                .map(|(name, _)| clap::builder::PossibleValue::new(*name)),
        ))
    }
}

/// Prints the completion script for the shell named; an unknown shell is a
/// usage error naming the ones there are.
pub fn run(args: &CompletionsArgs) -> anyhow::Result<()> {
    let shell = SHELLS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(&args.shell))
        .map(|(_, shell)| *shell)
        .ok_or_else(|| {
            usage(format!(
                "unknown shell `{}` (use bash, zsh, fish or powershell)",
                args.shell
            ))
        })?;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "sluice", &mut script);
    to_stdout(&script)
}
