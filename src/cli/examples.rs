//! What each command's help ends with: `-h` points to `--help`, and
//! `--help` ends with examples.

/// The end of `sluice --help`: examples (the exit codes come first).
pub const TOP: &str = "\
Examples:
  sluice ls /data/clicks                          # what a Spark output holds
  sluice train /data/clicks --exec 'python train.py' --devices 2
  sluice master hdfs://nn:8020/warehouse/clicks --state /var/lib/sluice/clicks
  sluice worker --master http://master:7070 --exec 'python train.py'
  sluice run jobs/clicks.toml --dry-run           # a job file, for cron
  sluice completions bash > ~/.local/share/bash-completion/completions/sluice";

/// The last line of `sluice train -h`.
pub const TRAIN_SHORT: &str = "Every option (with more detail) and examples: sluice train --help";

/// The end of `sluice train --help`.
pub const TRAIN: &str = "\
Examples:
  # A built-in model on a local Spark output, resumable after a crash
  sluice train /data/clicks --model logistic --label label --features f1,f2 --state st --output m.json
  # An external trainer per device, fed Arrow batches (the exec protocol)
  sluice train hdfs://nn:8020/warehouse/clicks/dt=2026-11-29 --devices 2 --exec 'python train.py'
  # After spark-submit: wait for _SUCCESS, then train
  sluice train s3://lake/clicks --wait-success=2h --exec 'python train.py'
  # A Delta table at an older version; a table by name from a catalog
  sluice train s3://lake/clicks_delta --table-version 7 --exec 'python train.py'
  sluice train web.clicks --catalog thrift://metastore:9083 --where \"dt >= '2026-11-01'\"
  # Keep training what lands later, until stopped (exit 130, resumable)
  sluice train s3://lake/events --follow --state /var/lib/sluice/events --exec 'python train.py'";

/// The last line of `sluice master -h`.
pub const MASTER_SHORT: &str = "Every option (with more detail) and examples: sluice master --help";

/// The end of `sluice master --help`.
pub const MASTER: &str = "\
Examples:
  # Serve a job's tasks to any number of workers
  export SLUICE_TOKEN=$(openssl rand -hex 24)     # the job token, on every machine
  sluice master hdfs://nn:8020/warehouse/clicks --listen 0.0.0.0:7070 --state /var/lib/sluice/clicks
  # Then on each machine:
  sluice worker --master http://master:7070 --devices 2 --exec 'python train.py'
  # Progress (also at http://master:7070/ and /metrics)
  sluice status --master http://master:7070";

/// The last line of `sluice worker -h`.
pub const WORKER_SHORT: &str = "Every option (with more detail) and examples: sluice worker --help";

/// The end of `sluice worker --help`.
pub const WORKER: &str = "\
Examples:
  # Join a master's job with two devices; leave at any time (SIGTERM)
  sluice worker --master http://master:7070 --token-file /etc/sluice/token --devices 2 --exec 'python train.py'
  # Over HTTPS; a worker stopped by a signal exits 143 (a Kubernetes Job's pod)
  sluice worker --master https://sluice-master:7070 --ca-file ca.pem --stopped-exit-code 143 --exec 'python train.py'";

/// The last line of `sluice ls -h`.
pub const LS_SHORT: &str = "Every option (with more detail) and examples: sluice ls --help";

/// The end of `sluice ls --help`.
pub const LS: &str = "\
Examples:
  sluice ls /data/clicks                      # partitions, files, rows, bytes, tasks
  sluice ls s3://lake/clicks_delta --json     # the same as JSON, for scripts
  sluice ls /data/clicks --where \"dt >= '2026-11-01'\"
  sluice ls web.clicks --catalog thrift://metastore:9083";

/// The last line of `sluice run -h`.
pub const RUN_SHORT: &str = "Every option (with more detail) and examples: sluice run --help";

/// The end of `sluice run --help`.
pub const RUN: &str = "\
Examples:
  sluice run jobs/clicks.toml --dry-run       # what would be trained, what waits
  sluice run jobs/clicks.toml                 # train it (the state records it)
  # cron, daily at 02:00 (jobs/cron/sluice.crontab):
  0 2 * * * sluice run /etc/sluice/clicks.toml >> /var/log/sluice/clicks.log 2>&1";

/// The end of `sluice status --help`.
pub const STATUS: &str = "\
Examples:
  sluice status --master http://master:7070 --token-file /etc/sluice/token
  sluice status --master http://master:7070 --token-file /etc/sluice/token --json";

/// The end of `sluice completions --help`.
pub const COMPLETIONS: &str = "\
Examples:
  sluice completions bash > ~/.local/share/bash-completion/completions/sluice
  sluice completions zsh > ~/.zfunc/_sluice      # with fpath+=~/.zfunc in .zshrc
  sluice completions fish > ~/.config/fish/completions/sluice.fish
  sluice completions powershell >> $PROFILE";

/// The end of `sluice man --help`.
pub const MAN: &str = "\
Examples:
  sluice man | man -l -
  sluice man --dir ~/.local/share/man/man1     # then: man sluice-train";

/// The end of `sluice version --help`.
pub const VERSION: &str = "\
Examples:
  sluice version            # sluice 0.1.0 (3c88b29 2026-12-03, dist)
  sluice version --json     # for a bug report";
